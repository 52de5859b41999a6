"""StepConfig: the one thing that crosses from the notebook to the engines.

Validation happens here, on the client, before anything is dispatched: a combination that
cannot work raises ConfigError naming the fields and what to do instead. The few checks
that depend on the hardware (CUDA graphs on CPU ranks) run in ``StepConfig.check_device``,
which the Lab calls with the device its engines report.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from .scenarios_spec import SCENARIOS, scenario_spec

COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# Modes under which inductor itself captures CUDA graphs (cudagraph trees).
CAPTURING_MODES = ("reduce-overhead", "max-autotune")
BACKENDS = ("inductor", "aot_eager", "eager", "cudagraphs")
DYNAMIC = ("auto", "static", "dynamic", "mark")
AUTOCAST = ("off", "bf16", "fp16")
AUTOCAST_SCOPES = ("forward", "forward+loss", "step")
CUDAGRAPH = ("off", "manual")
PARALLEL = ("none", "ddp", "fsdp2", "tp")
CACHE_POLICIES = ("fresh", "continue")
DDP_WRAP = ("compile-inside", "compile-outside")
OPTIMIZE_DDP = ("ddp_optimizer", "python_reducer", "off")
FSDP_COMPILE = ("per-block", "whole")
SEQ_SCHEDULES = ("fixed", "varying", "bucketed")
CAPTURE = ("full", "light", "off")
SIZES = ("auto", "small", "large")


class ConfigError(ValueError):
    """A StepConfig that cannot run; the message names the fields and the fix."""


def _choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"{name}={value!r} is not one of {', '.join(map(repr, allowed))}")


@dataclass(frozen=True)
class StepConfig:
    """What one distributed step looks like. Frozen and picklable; compare with ``diff``."""

    scenario: str = "tp-mlp-infer"
    """Workload: model, inputs and step. See ``nbtools.scenarios_spec.SCENARIOS``."""

    compile: str = "off"
    """torch.compile mode; ``off`` runs eagerly. reduce-overhead and max-autotune also make
    inductor capture CUDA graphs (cudagraph trees) on GPU."""

    backend: str = "inductor"
    """torch.compile backend. A ``compile`` mode other than default applies to inductor only."""

    fullgraph: bool = False
    """Make a graph break an error instead of a split."""

    dynamic: str = "auto"
    """Shape policy: auto (PyTorch's automatic dynamic), static (dynamic=False: recompile per
    shape), dynamic (dynamic=True), mark (mark_dynamic on the batch/sequence dimension)."""

    autocast: str = "off"
    """Autocast dtype: off, bf16 or fp16."""

    autocast_scope: str = "forward"
    """What autocast wraps: forward, forward+loss, or step (backward inside too)."""

    cudagraph: str = "off"
    """``manual``: our own torch.cuda.CUDAGraph capture of the step (GPU only). The
    compiler's own graphs come with ``compile``'s mode, not with this field."""

    parallel: Optional[str] = None
    """none | ddp | fsdp2 | tp. None takes the scenario's default strategy."""

    cache: str = "fresh"
    """Compile caches across runs: fresh (reset when the config changes, so each config is
    measured on its own) or continue (keep them: recompiles and limits as a long job sees)."""

    ddp_wrap: str = "compile-inside"
    """For DDP: compile-inside is DDP(torch.compile(m)); compile-outside is
    torch.compile(DDP(m)), which compiles nothing on torch 2.11-2.13 (the run shows 0 graphs)."""

    optimize_ddp: str = "ddp_optimizer"
    """torch._dynamo.config.optimize_ddp: ddp_optimizer (a graph per bucket), python_reducer
    (compiled autograd traces the reducer), off (one graph; all-reduces after backward)."""

    reshard_after_forward: bool = True
    """For FSDP2: free each block's all-gathered parameters after its forward (True: less
    memory, gathered again for backward) or keep them until backward (False)."""

    fsdp_compile: str = "per-block"
    """For FSDP2 with compile on: per-block compiles each block, then fully_shard per block
    (torchtitan's order); whole shards first, then compiles the whole model in one call."""

    batch: Optional[int] = None
    """Batch size; None takes the scenario's default for the device."""

    seq_len: Optional[int] = None
    """Sequence length (the maximum for varying/bucketed); None: the scenario's default."""

    seq_schedule: Optional[str] = None
    """fixed, varying (a new length each step), or bucketed (varying, padded up to buckets).
    None takes the scenario's default (varying for varlen-train, else fixed)."""

    size: str = "auto"
    """Model size: small (CPU tests), large (GPU), auto (small on CPU, large on GPU)."""

    warmup: int = 3
    """Warm-up steps before measuring (compiles happen here)."""

    steps: int = 10
    """Measured steps, timed without the profiler."""

    profiled: int = 3
    """Steps run under the profiler after the measured ones (0: no timeline)."""

    capture: str = "full"
    """full: torch.profiler + NVTX over the profiled steps; light: CUDA-event step times and
    NVTX ranges only; off: no capture."""

    check: bool = False
    """Compare the first step's output with an eager run on the same inputs."""

    torch_trace: bool = False
    """Write a TORCH_TRACE folder per rank (open with tlparse)."""

    seed: int = 0
    """Seed for weights and inputs; identical on every rank unless the scenario shards."""

    def __post_init__(self):
        _choice("compile", self.compile, COMPILE_MODES)
        _choice("backend", self.backend, BACKENDS)
        _choice("dynamic", self.dynamic, DYNAMIC)
        _choice("autocast", self.autocast, AUTOCAST)
        _choice("autocast_scope", self.autocast_scope, AUTOCAST_SCOPES)
        _choice("cudagraph", self.cudagraph, CUDAGRAPH)
        _choice("cache", self.cache, CACHE_POLICIES)
        _choice("ddp_wrap", self.ddp_wrap, DDP_WRAP)
        _choice("optimize_ddp", self.optimize_ddp, OPTIMIZE_DDP)
        _choice("fsdp_compile", self.fsdp_compile, FSDP_COMPILE)
        if not isinstance(self.reshard_after_forward, bool):
            raise ConfigError(f"reshard_after_forward={self.reshard_after_forward!r}: True or False")
        if self.seq_schedule is not None:
            _choice("seq_schedule", self.seq_schedule, SEQ_SCHEDULES)
        _choice("capture", self.capture, CAPTURE)
        _choice("size", self.size, SIZES)
        if self.parallel is not None:
            _choice("parallel", self.parallel, PARALLEL)
        if self.scenario != "custom" and self.scenario not in SCENARIOS:
            raise ConfigError(
                f"scenario={self.scenario!r} is unknown; use one of {', '.join(SCENARIOS)} "
                "or lab.run(my_step_fn, cfg) for your own step")
        for name in ("warmup", "steps", "profiled", "seed"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"{name}={v!r} must be an integer >= 0")
        if self.steps < 1:
            raise ConfigError("steps=0: measure at least one step")
        for name in ("batch", "seq_len"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ConfigError(f"{name}={v!r} must be a positive integer or None")
        self._check_combination()

    # -- cross-field rules -------------------------------------------------------------
    def _check_combination(self) -> None:
        spec = scenario_spec(self.scenario)
        if self.compile == "off":
            if self.backend != "inductor":
                raise ConfigError(
                    f"backend={self.backend!r} with compile='off': nothing is compiled, so the "
                    "backend would be ignored. Set compile='default' to use that backend.")
        elif self.backend != "inductor" and self.compile != "default":
            raise ConfigError(
                f"compile={self.compile!r} is an inductor mode but backend={self.backend!r}; "
                "torch.compile would ignore the mode. Use compile='default' with this backend, "
                "or backend='inductor'.")
        if self.cudagraph == "manual":
            if self.compile in CAPTURING_MODES:
                raise ConfigError(
                    f"cudagraph='manual' with compile={self.compile!r}: that mode already "
                    "captures CUDA graphs (cudagraph trees). Use compile='default' or "
                    "'max-autotune-no-cudagraphs' with manual capture, or cudagraph='off'.")
            if self.backend == "cudagraphs" and self.compile != "off":
                raise ConfigError("cudagraph='manual' with backend='cudagraphs' captures twice; "
                                  "pick one.")
            if self.resolved_schedule != "fixed":
                raise ConfigError(
                    f"cudagraph='manual' with seq_schedule={self.resolved_schedule!r}: a captured "
                    "graph replays fixed shapes. Use seq_schedule='fixed'.")
            if self.dynamic != "auto":
                raise ConfigError("cudagraph='manual' replays one shape: leave dynamic='auto'.")
        if self.autocast == "off" and self.autocast_scope != "forward":
            raise ConfigError(
                f"autocast_scope={self.autocast_scope!r} with autocast='off' would be ignored; "
                "pick an autocast dtype or leave the scope at 'forward'.")
        if not spec.train and self.autocast_scope != "forward":
            raise ConfigError(
                f"autocast_scope={self.autocast_scope!r}: {self.scenario} is inference (no "
                "loss, no backward); use autocast_scope='forward'.")
        par = self.resolved_parallel
        if self.scenario != "custom" and par not in spec.parallel:
            raise ConfigError(
                f"parallel={par!r} is not supported by scenario {self.scenario!r}; it supports "
                f"{', '.join(spec.parallel)}.")
        if par != "ddp":
            if self.ddp_wrap != "compile-inside":
                raise ConfigError(f"ddp_wrap={self.ddp_wrap!r} applies to parallel='ddp' only.")
            if self.optimize_ddp != "ddp_optimizer":
                raise ConfigError(f"optimize_ddp={self.optimize_ddp!r} applies to parallel='ddp' only.")
        elif self.compile == "off":
            if self.ddp_wrap != "compile-inside" or self.optimize_ddp != "ddp_optimizer":
                raise ConfigError("ddp_wrap / optimize_ddp choose how DDP is compiled; with "
                                  "compile='off' they would be ignored. Turn compile on.")
        if par != "fsdp2" and (not self.reshard_after_forward or self.fsdp_compile != "per-block"):
            raise ConfigError("reshard_after_forward / fsdp_compile apply to parallel='fsdp2' "
                              f"only (this config runs {par!r}).")
        if par == "fsdp2" and self.compile == "off" and self.fsdp_compile != "per-block":
            raise ConfigError(f"fsdp_compile={self.fsdp_compile!r} chooses what is compiled; "
                              "with compile='off' it would be ignored. Turn compile on.")
        if par in ("ddp", "fsdp2") and self.cudagraph == "manual":
            raise ConfigError(
                f"cudagraph='manual' with parallel={par!r}: capturing a {par} training step needs "
                "static graphs, eager warm-up on a side stream and async NCCL error handling off, "
                "which the lab cannot guarantee. Use compile='reduce-overhead' or parallel='none'/'tp'.")
        if self.optimize_ddp == "python_reducer" and self.ddp_wrap != "compile-inside":
            raise ConfigError("optimize_ddp='python_reducer' needs ddp_wrap='compile-inside'.")
        if self.seq_schedule not in (None, "fixed") and not spec.sequence:
            raise ConfigError(
                f"seq_schedule={self.seq_schedule!r}: {self.scenario} has no sequence dimension; "
                "use varlen-train or fsdp2-train.")
        if self.seq_len is not None and not spec.sequence:
            raise ConfigError(f"seq_len is set but {self.scenario} has no sequence dimension.")
        if self.compile == "off":
            if self.fullgraph:
                raise ConfigError("fullgraph=True with compile='off' would be ignored; turn compile on.")
            if self.dynamic != "auto":
                raise ConfigError(f"dynamic={self.dynamic!r} with compile='off' would be ignored; "
                                  "turn compile on (dynamic shapes are a compiler setting).")

    # -- derived -----------------------------------------------------------------------
    @property
    def resolved_parallel(self) -> str:
        if self.parallel is not None:
            return self.parallel
        if self.scenario == "custom":
            return "none"
        return scenario_spec(self.scenario).parallel[0]

    @property
    def resolved_schedule(self) -> str:
        if self.seq_schedule is not None:
            return self.seq_schedule
        return scenario_spec(self.scenario).schedule

    @property
    def compiled(self) -> bool:
        return self.compile != "off"

    def check_device(self, device_type: str) -> None:
        """Rules that need to know the ranks' device ('cuda' or 'cpu')."""
        if device_type == "cuda":
            return
        if self.cudagraph == "manual":
            raise ConfigError("cudagraph='manual' needs CUDA; these ranks run on CPU. "
                              "Set cudagraph='off'.")
        if self.compile != "off" and self.backend == "cudagraphs":
            raise ConfigError("backend='cudagraphs' needs CUDA; these ranks run on CPU.")
        if self.autocast == "fp16":
            raise ConfigError("autocast='fp16' on CPU ranks: CPU autocast supports bf16; use "
                              "autocast='bf16'.")

    def unused_on(self, device_type: str) -> tuple[str, ...]:
        """Fields whose effect does not exist on this device (reported with the run)."""
        out = []
        if device_type != "cuda" and self.compile in CAPTURING_MODES:
            out.append(f"compile={self.compile}: inductor captures no CUDA graphs on CPU")
        return tuple(out)

    def replace(self, **changes) -> "StepConfig":
        return dataclasses.replace(self, **changes)

    def diff(self, other: "StepConfig") -> dict:
        """{field: (self value, other value)} for fields that differ."""
        return {f.name: (getattr(self, f.name), getattr(other, f.name))
                for f in dataclasses.fields(self)
                if getattr(self, f.name) != getattr(other, f.name)}

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "StepConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"unknown StepConfig field(s): {', '.join(sorted(unknown))}")
        return cls(**d)

    def label(self) -> str:
        """Short human label: only what differs from the defaults."""
        base = StepConfig(scenario=self.scenario)
        parts = [self.scenario] + [f"{k}={v[1]}" for k, v in base.diff(self).items()
                                   if k not in ("scenario",)]
        return " ".join(parts)
