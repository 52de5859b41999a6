"""What each built-in scenario is, without importing torch (the client validates with it)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScenarioSpec:
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
    if name == "custom":
        return ScenarioSpec("custom", ("none", "ddp", "fsdp2", "tp"), train=True,
                            sequence=False, batch=(1, 1), about="a user's own step function")
    return SCENARIOS[name]
