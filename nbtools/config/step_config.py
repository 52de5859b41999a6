"""StepConfig: the one thing that crosses from the notebook to the engines.

Validation happens here, on the client, before anything is dispatched: a combination that
cannot work raises ConfigError naming the fields and what to do instead. The few checks
that depend on the hardware (CUDA graphs on CPU ranks) run in ``StepConfig.check_device``,
once per run, with the device the engines report (workload.check_run, from Lab.check).
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

from nbtools.config.scenarios import (DEFAULT_SCENARIO, SCENARIOS, DefaultScenario,  # noqa: F401
                                      check_scenario, scenario_spec)
from nbtools.config.values import (ConfigError, as_bool, as_int, as_str,  # noqa: F401
                                   show_value)

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
OPTIMIZER_IMPLS = ("as-built", "foreach", "fused", "compiled")
MATMUL_PRECISIONS = ("as-set", "highest", "high")
MEMORY_FORMATS = ("as-built", "channels_last")
RUN_ONLY = ("warmup", "steps", "profiled", "capture", "check", "cache")
"""Fields that change how a run is measured, not what is built or stepped: the engines
reuse their state across them (engine/prepare.py), and a change of only these is no
experiment on the step."""


# Field -> allowed strings (None: any string). Every field has exactly one of the three
# kinds below; _OPTIONAL ones may also be None (the scenario's default).
FIELD_CHOICES = {"scenario": None, "compile": COMPILE_MODES, "backend": BACKENDS, "dynamic": DYNAMIC,
            "autocast": AUTOCAST, "autocast_scope": AUTOCAST_SCOPES, "cudagraph": CUDAGRAPH,
            "parallel": PARALLEL, "cache": CACHE_POLICIES, "ddp_wrap": DDP_WRAP,
            "optimize_ddp": OPTIMIZE_DDP, "fsdp_compile": FSDP_COMPILE,
            "seq_schedule": SEQ_SCHEDULES, "size": SIZES, "capture": CAPTURE,
            "optimizer_impl": OPTIMIZER_IMPLS, "matmul_precision": MATMUL_PRECISIONS,
            "memory_format": MEMORY_FORMATS}
_BOOLS = ("fullgraph", "reshard_after_forward", "check", "torch_trace", "memory", "stack")
# Bounds: generous for any real job, finite so a typo (an extra 000, a seed from the wrong
# variable) is caught here and not as an overflow or an hour-long run on the engines.
INT_RANGES = {"warmup": (0, 100_000), "steps": (1, 1_000_000), "profiled": (0, 1_000),
         "batch": (1, 1 << 20), "seq_len": (1, 1 << 20), "seed": (0, 2**32 - 1)}
_OPTIONAL = frozenset({"parallel", "seq_schedule", "batch", "seq_len"})
@dataclass(frozen=True)
class StepConfig:
    """What one distributed step looks like: the one thing that crosses to the engines.

    Frozen and picklable, checked once when made: a combination that cannot work raises
    ConfigError naming the fields and what to do instead. Each field below says what it
    toggles; ``replace`` makes a changed copy, ``diff`` says what two configs change.

    Example:
        >>> from nbtools import StepConfig
        >>> cfg = StepConfig(scenario="tp-mlp-infer", compile="reduce-overhead", autocast="bf16")
        >>> cfg.replace(compile="off").diff(cfg)
        {'compile': ('off', 'reduce-overhead')}
    """

    scenario: str = DEFAULT_SCENARIO
    """Workload: model, inputs and step. See ``nbtools.config.scenarios.SCENARIOS``."""

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
    torch.compile(DDP(m)): Dynamo breaks the graph in DDP's forward and compiles the model's
    forward whole, without DDP's per-bucket split (the run flags it; docs/findings.md)."""

    optimize_ddp: str = "ddp_optimizer"
    """torch._dynamo.config.optimize_ddp: ddp_optimizer (a graph per bucket), python_reducer
    (compiled autograd traces the reducer), off (one graph; all-reduces after backward)."""

    reshard_after_forward: bool = True
    """For FSDP2: free each block's all-gathered parameters after its forward (True: less
    memory, gathered again for backward) or keep them until backward (False)."""

    fsdp_compile: str = "per-block"
    """For FSDP2 with compile on: per-block compiles each block, then fully_shard per block
    (torchtitan's order); whole shards first, then compiles the whole model in one call."""

    optimizer_impl: str = "as-built"
    """How a training step's optimizer runs: as-built (as the Workload's or the scenario's
    optimizer was made), foreach or fused (the same optimizer remade with foreach=True /
    fused=True: fewer, larger kernels per step), or compiled (its step under torch.compile,
    PyTorch's "compiled optimizer" recipe). Training steps only."""

    matmul_precision: str = "as-set"
    """fp32 matrix products and convolutions: as-set (whatever the process set; PyTorch's
    default is full fp32 matmuls and TF32 convolutions), highest (full fp32 for both) or
    high (TF32 on the tensor cores for both: 10 mantissa bits instead of 23, many times the
    fp32 rate on Ampere and newer). Set on every rank for the run
    (torch.set_float32_matmul_precision, torch.backends.cudnn.allow_tf32) and put back after;
    what autocast turns to bf16/fp16 does not read it."""

    memory_format: str = "as-built"
    """The model's and its 4-D inputs' memory layout: as-built, or channels_last (NHWC, what
    cuDNN's tensor-core convolutions run on: no NCHW<->NHWC conversion kernels around each
    convolution). For a built-in scenario or a Workload; a step function of your own sets
    its own layout."""

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

    memory: bool = False
    """Record memory per rank: the profiler's allocator events over the profiled steps and,
    on CUDA, the caching allocator's history (CUDA-graph private pools included) for the
    whole run: the timeline's memory lane and the summary's graph_pool_mb."""

    stack: bool = False
    """Record the Python stack of the profiled steps (the profiler's ``with_stack``): each
    op's tooltip names the innermost frames of your code (file:line function). Off by
    default: the Python tracer slows every call of the profiled steps."""

    seed: int = 0
    """Seed for weights and inputs; identical on every rank unless the scenario shards."""

    def __post_init__(self):
        # The one place a StepConfig is checked (the constructor, replace and from_dict all
        # come here): every field's type and range first, so the cross-field rules below
        # only ever see well-typed values.
        for name in FIELD_CHOICES:
            object.__setattr__(self, name, field_value(name, getattr(self, name)))
        if self.scenario != "custom" and self.scenario not in SCENARIOS:
            raise ConfigError(
                f"scenario={self.scenario!r} is unknown; use one of {', '.join(SCENARIOS)} "
                "or lab.run(my_step_fn, cfg) for your own step")
        for name in _BOOLS + tuple(INT_RANGES):
            object.__setattr__(self, name, field_value(name, getattr(self, name)))
        self._check_combination()

    # -- cross-field rules -------------------------------------------------------------
    def _check_combination(self) -> None:
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
        par = self.resolved_parallel
        if not self.scenario_unchosen:
            self.check_scenario()
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
        if self.compile == "off":
            if self.fullgraph:
                raise ConfigError("fullgraph=True with compile='off' would be ignored; turn compile on.")
            if self.dynamic != "auto":
                raise ConfigError(f"dynamic={self.dynamic!r} with compile='off' would be ignored; "
                                  "turn compile on (dynamic shapes are a compiler setting).")

    @property
    def scenario_unchosen(self) -> bool:
        """True for a config that never named a scenario (StepConfig's default one)."""
        return type(self.scenario) is DefaultScenario

    def check_scenario(self) -> None:
        """The scenario's own rules (its strategies, train or inference, sequence dim);
        ConfigError naming the scenario. A Workload or step function run never comes here."""
        check_scenario(self, ConfigError)

    # -- derived -----------------------------------------------------------------------
    @property
    def resolved_parallel(self) -> str:
        """The strategy that runs: ``parallel``, else the scenario's default (none for custom)."""
        if self.parallel is not None:
            return self.parallel
        if self.scenario == "custom":
            return "none"
        return scenario_spec(self.scenario).parallel[0]

    @property
    def resolved_schedule(self) -> str:
        """The sequence schedule that runs: ``seq_schedule``, else the scenario's default."""
        if self.seq_schedule is not None:
            return self.seq_schedule
        return scenario_spec(self.scenario).schedule

    @property
    def compiled(self) -> bool:
        """True when torch.compile is on (``compile`` is not "off")."""
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
        """A copy with some fields changed, checked like a new config.

        Args:
            **changes: field=value pairs.

        Returns:
            StepConfig: the new config (this one is frozen and stays as it was).

        Raises:
            ConfigError: an unknown field (with the closest name), a bad value, or a
                combination that cannot work.

        Example:
            >>> StepConfig().replace(compile="default", dynamic="mark").label()
            'tp-mlp-infer compile=default dynamic=mark'
        """
        return dataclasses.replace(self, **refuse_unknown("StepConfig.replace", changes))

    def diff(self, other: "StepConfig") -> dict:
        """{field: (self value, other value)} for fields that differ."""
        return {f.name: (getattr(self, f.name), getattr(other, f.name))
                for f in dataclasses.fields(self)
                if getattr(self, f.name) != getattr(other, f.name)}

    def to_dict(self) -> dict:
        """Every field by name: what a run.json keeps (``from_dict`` reads it back)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d) -> "StepConfig":
        """The inverse of ``to_dict`` (a run.json's ``config``)."""
        if not isinstance(d, Mapping):
            raise ConfigError(f"StepConfig.from_dict expects a dict of field -> value (what "
                              f"to_dict() gives), got a {type(d).__name__}: {show_value(d)}")
        return cls(**refuse_unknown("StepConfig.from_dict", d))

    def label(self) -> str:
        """Short human label: only what differs from the defaults."""
        base = StepConfig(scenario=self.scenario)
        parts = [self.scenario] + [f"{k}={v[1]}" for k, v in base.diff(self).items()
                                   if k not in ("scenario",)]
        return " ".join(parts)


_FIELDS = tuple(f.name for f in dataclasses.fields(StepConfig))


def refuse_unknown(where: str, changes: Mapping) -> dict:
    """ConfigError for names that are not fields (a typo would otherwise be a TypeError
    from the generated __init__, naming no fix)."""
    bad = [k for k in changes if not isinstance(k, str) or k not in _FIELDS]
    if bad:
        hints = []
        for k in bad:
            close = difflib.get_close_matches(k, _FIELDS, 1) if isinstance(k, str) else []
            hints.append(f"{show_value(k)}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ConfigError(f"{where}: unknown StepConfig field(s) {', '.join(hints)}; the "
                          f"fields are {', '.join(_FIELDS)}")
    return dict(changes)


def field_value(name: str, value):
    """``value`` checked as field ``name`` on its own (its type and range, not the rules
    that combine fields), as the constructor stores it; else ConfigError naming it."""
    if name in FIELD_CHOICES:
        return as_str(name, value, FIELD_CHOICES[name], optional=name in _OPTIONAL)
    if name in _BOOLS:
        return as_bool(name, value)
    if name in INT_RANGES:
        low, high = INT_RANGES[name]
        return as_int(name, value, low, high, optional=name in _OPTIONAL)
    return value


def checked_changes(where: str, changes: Mapping) -> dict:
    """A change of StepConfig fields, each name and value checked on its own (the
    combination is checked where the change meets a config): ConfigError naming ``where``,
    the field and what to give."""
    out = refuse_unknown(where, changes)
    try:
        return {k: field_value(k, v) for k, v in out.items()}
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def _checked_init(init):
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **refuse_unknown("StepConfig", kwargs))
    return __init__


# StepConfig(colour=...) and cfg.replace(colour=...) both arrive here (replace calls the class).
StepConfig.__init__ = _checked_init(StepConfig.__init__)
