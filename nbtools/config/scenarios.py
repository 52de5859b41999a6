"""What each built-in scenario is, without importing torch (the client validates with it)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScenarioSpec:
    """What a built-in scenario is: its strategies (the first is the default), whether it
    trains and has a sequence dimension, and its default sizes (small, large)."""
    name: str
    parallel: tuple          # supported strategies; the first is the default
    train: bool              # has a loss, backward and optimizer step
    sequence: bool           # has a sequence dimension (seq_len, seq_schedule apply)
    batch: tuple             # default batch (small, large)
    seq_len: tuple = (0, 0)  # default (maximum) sequence length (small, large)
    schedule: str = "fixed"  # default sequence-length schedule
    about: str = ""


SCENARIOS = {s.name: s for s in (
    ScenarioSpec("tp-mlp-infer", ("tp", "none"), train=False, sequence=False, batch=(4, 1),
                 about="Column/row-parallel MLP blocks, all-reduce through functional "
                       "collectives, small-batch inference: the CUDA-graph case."),
    ScenarioSpec("ddp-train", ("ddp", "none"), train=True, sequence=False, batch=(8, 128),
                 about="DDP training of a small residual conv net (BatchNorm-free)."),
    ScenarioSpec("resnet50-ddp", ("ddp", "none"), train=True, sequence=False, batch=(2, 64),
                 about="DDP training of torchvision's ResNet-50 (GPU hosts with torchvision)."),
    ScenarioSpec("fsdp2-train", ("fsdp2", "ddp", "none"), train=True, sequence=True,
                 batch=(2, 8), seq_len=(32, 1024),
                 about="Transformer blocks, fully_shard per block, training."),
    ScenarioSpec("varlen-train", ("ddp", "fsdp2", "none"), train=True, sequence=True,
                 batch=(2, 16), seq_len=(32, 512), schedule="varying",
                 about="Transformer training whose sequence length changes each step."),
)}


def scenario_spec(name: str) -> ScenarioSpec:
    """The spec of scenario ``name`` ("custom": any strategy, for a user's own step)."""
    if name == "custom":
        return ScenarioSpec("custom", ("none", "ddp", "fsdp2", "tp"), train=True,
                            sequence=False, batch=(1, 1), about="a user's own step function")
    return SCENARIOS[name]


class DefaultScenario(str):
    """The scenario of a StepConfig that chose none. It runs when the config runs alone
    (lab.run(cfg)); its rules (strategies, train or inference, sequence dim) judge the config
    only then (check_scenario, from workload.check_run), never a Workload's or a step
    function's run, which the person may have written StepConfig(parallel="ddp") for."""

    def __reduce__(self):
        return DefaultScenario, (str(self),)


DEFAULT_SCENARIO = DefaultScenario("tp-mlp-infer")


def check_scenario(cfg, error) -> None:
    """StepConfig.check_scenario (``error``: ConfigError, which lives there)."""
    if cfg.scenario == "custom":
        return
    spec = SCENARIOS[cfg.scenario]
    par = cfg.resolved_parallel
    chosen = ("" if not cfg.scenario_unchosen else
              " (StepConfig's default scenario: give scenario=... to run another, or "
              "lab.run(workload, cfg) for your own model)")
    if not spec.train and cfg.optimizer_impl != "as-built":
        raise error(
            f"optimizer_impl={cfg.optimizer_impl!r}: {cfg.scenario} is inference (no "
            f"optimizer){chosen}; leave optimizer_impl='as-built'.")
    if not spec.train and cfg.autocast_scope != "forward":
        raise error(
            f"autocast_scope={cfg.autocast_scope!r}: {cfg.scenario} is inference (no "
            f"loss, no backward){chosen}; use autocast_scope='forward'.")
    if par not in spec.parallel:
        raise error(
            f"parallel={par!r} is not supported by scenario {cfg.scenario!r}{chosen}; it supports "
            f"{', '.join(spec.parallel)}.")
    if cfg.seq_schedule not in (None, "fixed") and not spec.sequence:
        raise error(
            f"seq_schedule={cfg.seq_schedule!r}: {cfg.scenario} has no sequence dimension; "
            "use varlen-train or fsdp2-train.")
    if cfg.seq_len is not None and not spec.sequence:
        raise error(f"seq_len is set but {cfg.scenario} has no sequence dimension.")
