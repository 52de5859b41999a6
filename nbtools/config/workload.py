"""Workload: a model the lab applies every toggle to. The built-in scenarios are Workloads
too (nbtools/engine/scenarios.py builds them), so a user's model and ours take one path on
the engine: ``nbtools.engine.materialize`` turns a Workload into the ``Built`` state that
nbtools/engine/apply.py wraps, compiles and steps.

``Workload.check(cfg)`` runs on the client before dispatch: a config the lab cannot honour
for this workload is a ConfigError there, never a silently different run.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Optional

from nbtools.config import imports
from nbtools.config.step_config import ConfigError, StepConfig

# Plan strings (as in transformers' tp_plan) -> torch.distributed.tensor.parallel styles.
TP_STYLES = ("colwise", "rowwise")


@dataclass
class Workload:
    """Your model, with what the strategies need to know about it.

    ``model``: ``lambda: MyNet()``; called on every rank, on its device (under
    ``torch.device(device)``), after ``torch.manual_seed(cfg.seed)``: every rank starts from
    the same weights.
    ``batch``: ``lambda step, device: (inputs, target)``; inputs a tensor or a tuple of
    tensors (the model is called as ``model(*inputs)``), target anything the loss takes
    (None for inference). Make it depend on ``step`` only, so configs compare fairly.
    ``loss``: ``(output, target) -> scalar``; None makes the workload inference (no
    backward, no optimizer, the step runs under no_grad).
    ``blocks``: ``lambda m: m.layers``; FSDP2 shards each block (then the root), and
    ``fsdp_compile="per-block"`` compiles each block in place (torchtitan's order).
    ``tp_plan``: for ``parallel="tp"``, a ``parallelize_module`` plan over a 1-D mesh of all
    ranks: ``{"layers.*.attn.q_proj": "colwise", "layers.*.attn.o_proj": "rowwise", ...}``
    (strings or ParallelStyle objects), or ``callable(model, mesh)`` returning such a plan,
    or returning the model it parallelised itself.
    ``dynamic_dims``: ``((input index, dim), ...)`` marked dynamic under ``dynamic="mark"``.
    ``items``: items per step on a rank (samples, tokens), or ``callable(step)``; gives
    items_per_s. ``flops``: model FLOPs per step on a rank, or ``callable(model)``; gives
    tflops (and MFU against the device's peak).
    ``optimizer``: ``callable(params) -> Optimizer``; default SGD(lr=1e-3, momentum=0.9),
    the built-in scenarios' optimizer.
    ``name``: shown in the run's notes. ``shapes``: ``callable(step) -> str`` for the
    steps table; default: the inputs' shapes.
    ``batch_size``: the samples ``batch`` makes a step (per rank), for a batch function
    that takes the size: ``lambda step, device, size: (inputs, target)``. Then
    ``StepConfig(batch=N)`` runs the workload at N samples (``items`` and ``flops`` scaled
    by N / batch_size), and the lab can try a larger batch itself (``lab.advise``'s
    larger-batch suggestion, ``lab.explore``); without it the batch is the function's
    alone and that suggestion is "(in your code)".
    ``imports``: modules the engines import as soon as a Lab sees this Workload, beside
    those the lab finds in its functions itself (``from transformers import
    LlamaForCausalLM`` inside ``model``): ``("transformers.models.llama.modeling_llama",)``
    or ``("mypkg.LazyName",)`` for a name a module gives out. A Lab open when the Workload
    is made (or made after it) imports them on its engines in the background, so a first
    run does not wait for them (``Lab(preload=False)`` turns that off; ``lab.preloads()``
    says what was imported and how long it took). A name that fails to import there is
    only recorded: the run's own import says what is wrong.

    Defined in a notebook cell, it travels to the engines by value (cloudpickle), with the
    functions and globals it uses; a redefined Workload is rebuilt on the next run.
    """

    model: Callable[[], Any]
    batch: Callable[[int, Any], tuple]
    loss: Optional[Callable] = None
    blocks: Optional[Callable] = None
    tp_plan: Any = None
    dynamic_dims: tuple = ()
    items: Any = 0
    flops: Any = 0.0
    optimizer: Optional[Callable] = None
    name: str = "workload"
    shapes: Optional[Callable[[int], str]] = None
    imports: tuple = ()
    batch_size: int = 0

    def __post_init__(self):
        for f in ("model", "batch"):
            if not callable(getattr(self, f)):
                raise ConfigError(f"Workload({f}=...) must be a function (e.g. model=lambda: "
                                  "MyNet(), batch=lambda step, device: (inputs, target))")
        if hasattr(self.model, "parameters") and not isinstance(self.model, type):
            raise ConfigError("Workload(model=...) got a built module; pass a function that "
                              "builds it, model=lambda: MyNet(): each rank builds its own, on "
                              "its device, seeded")
        for f in ("loss", "blocks", "optimizer", "shapes"):
            v = getattr(self, f)
            if v is not None and not callable(v):
                raise ConfigError(f"Workload({f}={v!r}) must be a function or None")
        if self.tp_plan is not None and not (callable(self.tp_plan) or isinstance(self.tp_plan, dict)):
            raise ConfigError("Workload(tp_plan=...) must be a dict {module path: 'colwise' | "
                              "'rowwise' | ParallelStyle} or callable(model, mesh)")
        if isinstance(self.tp_plan, dict):
            bad = {k: v for k, v in self.tp_plan.items() if isinstance(v, str) and v not in TP_STYLES}
            if bad:
                raise ConfigError(f"Workload(tp_plan=...): {bad} — plan strings are "
                                  f"{', '.join(TP_STYLES)}; give a ParallelStyle for others")
        dims = tuple(tuple(d) if isinstance(d, (tuple, list)) else (d,) for d in self.dynamic_dims)
        if any(len(d) != 2 or not all(isinstance(x, int) for x in d) for d in dims):
            raise ConfigError(f"Workload(dynamic_dims={self.dynamic_dims!r}): give (input index, "
                              "dim) pairs, e.g. ((0, 1),) for the sequence dim of input 0")
        self.dynamic_dims = dims
        if not (isinstance(self.batch_size, int) and not isinstance(self.batch_size, bool)
                and self.batch_size >= 0):
            raise ConfigError(f"Workload(batch_size={self.batch_size!r}): the samples a step "
                              "makes per rank, a positive int (or 0: the batch function "
                              "decides)")
        if self.batch_size and not takes_size(self.batch):
            raise ConfigError(f"Workload(batch_size={self.batch_size}) needs a batch function "
                              "that takes the size: batch=lambda step, device, size: "
                              "(inputs, target)")
        names = (self.imports,) if isinstance(self.imports, str) else self.imports
        if not isinstance(names, (tuple, list)) or not all(
                isinstance(n, str) and n and all(p.isidentifier() for p in n.split("."))
                for n in names):
            raise ConfigError(f"Workload(imports={self.imports!r}): give module names, e.g. "
                              "imports=('transformers.models.llama.modeling_llama',)")
        self.imports = tuple(names)
        imports.created(self)     # a Lab open in this process starts importing them now

    @property
    def train(self) -> bool:
        """True when the workload has a loss: its step runs backward and the optimizer."""
        return self.loss is not None

    def config(self, **fields) -> StepConfig:
        """A StepConfig for this workload (``scenario='custom'``: StepConfig's default
        scenario is a built-in one, whose own rules would apply), checked against it."""
        cfg = StepConfig(scenario="custom", **fields)
        self.check(cfg)
        return cfg

    def check(self, cfg: StepConfig) -> None:
        """ConfigError for every field of cfg this workload cannot honour."""
        par = cfg.resolved_parallel
        need = "Workload(%s=...)"
        if cfg.batch is not None and not self.batch_size:
            raise ConfigError(f"batch={cfg.batch} with a Workload: its batch function decides "
                              "the inputs; change it there, or give Workload(batch_size=N) "
                              "and batch=lambda step, device, size: ... to let the lab size "
                              "it.")
        if cfg.seq_len is not None:
            raise ConfigError(f"seq_len={cfg.seq_len} with a Workload: its batch function "
                              "decides the inputs; change it there and run again.")
        if cfg.seq_schedule not in (None, "fixed") or cfg.size != "auto":
            raise ConfigError("seq_schedule / size apply to the built-in scenarios; a "
                              "Workload's model and batch functions decide these.")
        if par == "tp" and self.tp_plan is None:
            raise ConfigError("parallel='tp' needs a plan: " + need % "tp_plan" +
                              " {module path: 'colwise' | 'rowwise'} over the ranks' mesh.")
        if par == "fsdp2" and cfg.compiled and cfg.fsdp_compile == "per-block" and self.blocks is None:
            raise ConfigError("fsdp_compile='per-block' compiles each block: give " +
                              need % "blocks" + " (e.g. blocks=lambda m: m.layers), or use "
                              "fsdp_compile='whole'.")
        if cfg.dynamic == "mark" and not self.dynamic_dims:
            raise ConfigError("dynamic='mark' marks the Workload's dynamic_dims, and it has "
                              "none: give " + need % "dynamic_dims" + " ((input, dim), ...).")
        if not self.train:
            if par == "ddp":
                raise ConfigError("parallel='ddp' synchronises gradients; this Workload has no "
                                  "loss (inference), so DDP has nothing to do (it refuses a "
                                  "model without trainable parameters). Use 'none' or 'tp'.")
            if cfg.autocast_scope != "forward":
                raise ConfigError(f"autocast_scope={cfg.autocast_scope!r}: this Workload has no "
                                  "loss (inference); use autocast_scope='forward'.")
            if not cfg.reshard_after_forward:
                raise ConfigError("reshard_after_forward=False keeps parameters for the "
                                  "backward; this Workload has no loss (inference).")
            if cfg.optimizer_impl != "as-built":
                raise ConfigError(f"optimizer_impl={cfg.optimizer_impl!r}: this Workload has "
                                  "no loss (inference), so no optimizer step; leave it "
                                  "'as-built'.")


def takes_size(fn) -> bool:
    """Whether a batch function takes a third argument, the batch size."""
    import inspect
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3


def check_step(fn, cfg: StepConfig) -> None:
    """ConfigError for a custom step (``lab.run(step, cfg)``) given fields it does not apply.
    A step that applies some itself says so: ``step.applies = ("parallel=ddp", "ddp_wrap")``
    (a field name allows any value; ``field=value`` that value only)."""
    applies = tuple(getattr(fn, "applies", ()) or ())
    default = StepConfig(scenario="custom")
    asked = {"parallel": cfg.resolved_parallel}
    asked.update({f: getattr(cfg, f) for f in ("ddp_wrap", "optimize_ddp", "reshard_after_forward",
                                               "fsdp_compile", "cudagraph", "dynamic",
                                               "optimizer_impl", "memory_format")})
    wrong = []
    for f, v in asked.items():
        dflt = "none" if f == "parallel" else getattr(default, f)
        if f == "dynamic" and v != "mark":
            continue      # auto/static/dynamic reach the step through ctx.compile
        if v != dflt and f not in applies and f"{f}={v}" not in applies:
            wrong.append(f"{f}={v!r}")
    if wrong:
        raise ConfigError(
            f"{', '.join(wrong)}: a custom step applies compile and autocast through ctx, not "
            "these (the lab does not know your model or inputs). Wrap your model in "
            "nbtools.Workload(model=..., batch=..., loss=...) and lab.run(workload, cfg): the "
            "lab then applies parallel, cudagraph and dynamic='mark' to it.")


def check_run(fn, cfg: StepConfig, device_type: str) -> None:
    """Every rule a run must pass before an engine runs it, beyond the config's own (its
    construction checks those): the device's rules, and the Workload's or the custom
    step's. Called once per run: by the lab before dispatch (Lab.check), or by an engine
    given a config no lab checked for its device (a test or benchmark calling it)."""
    if not isinstance(cfg, StepConfig):
        raise ConfigError(f"a run needs a StepConfig, got {type(cfg).__name__}")
    cfg.check_device(device_type)
    if fn is None:
        cfg.check_scenario()      # deferred for a config that chose no scenario
    if isinstance(fn, Workload):
        fn.check(cfg)
    elif fn is not None:
        check_step(fn, cfg)


# -- travelling by value ----------------------------------------------------------------
def to_payload(fn) -> bytes:
    """A step function or Workload defined in a notebook, a test file or a script the
    engines cannot import travels by value (its code, not its module's name)."""
    import dataclasses
    import functools
    import io
    import sys

    import cloudpickle
    # a Workload is nbtools' class; the functions in it are the user's
    parts = [getattr(fn, f.name) for f in dataclasses.fields(fn)] \
        if dataclasses.is_dataclass(fn) and type(fn).__module__.startswith("nbtools") else [fn]
    for part in parts:
        while isinstance(part, functools.partial):
            part = part.func
        mod = sys.modules.get(getattr(part, "__module__", None) or "")
        if mod is None or mod.__name__ == "__main__":
            continue
        top = mod.__name__.split(".")[0]
        installed = "-packages" in (getattr(mod, "__file__", None) or "")  # engines import it
        if not installed and top not in sys.stdlib_module_names and top not in ("nbtools", "torch"):
            try:
                cloudpickle.register_pickle_by_value(mod)
            except Exception:
                pass
    try:
        buf = io.BytesIO()
        _module_aware_pickler(cloudpickle)(buf).dump(fn)
        return buf.getvalue()
    except Exception as e:   # noqa: BLE001 - pickle raises TypeError, PicklingError, ...
        name = getattr(fn, "__name__", None) or type(fn).__name__
        raise ConfigError(f"{name}: cannot be sent to the engines ({type(e).__name__}: "
                          f"{str(e)[:160]}): it holds or refers to something that cannot be "
                          "pickled (a lock, an open file, a socket, a generator). Create that "
                          "inside the step (or the Workload's functions) instead of "
                          "capturing it from the notebook") from None


def _module_aware_pickler(cloudpickle):
    """cloudpickle sends the loaded submodules a by-value function can reach
    (``torch._dynamo.config`` for ``torch._dynamo.config.x = 1``), and it reduces modules by
    exact type: torch's config modules are a ModuleType subclass (ConfigModuleInstance)
    and would fail with "cannot pickle". An importable module travels as its name."""
    import importlib
    import sys
    import types

    class Pickler(cloudpickle.Pickler):
        def reducer_override(self, obj):
            if (isinstance(obj, types.ModuleType) and type(obj) is not types.ModuleType
                    and sys.modules.get(obj.__name__) is obj):
                return importlib.import_module, (obj.__name__,)
            return super().reducer_override(obj)
    return Pickler


def from_payload(payload) -> tuple:
    """Engine side: (step or Workload, key of its code). The key hashes the pickled bytes
    (code, constants, closures and the globals it reads), so state is reused only while all
    of that is unchanged: an edited cell never runs stale code."""
    if not isinstance(payload, bytes):
        return payload, ""
    import hashlib

    import cloudpickle
    return cloudpickle.loads(payload), hashlib.sha256(payload).hexdigest()[:16]


def patch_text(patch: dict) -> str:
    """A model patch as the line a person writes: ``model.config.use_cache=False``."""
    return ", ".join(f"model.{k}={v!r}" for k, v in patch.items())


def with_model_patch(workload: Workload, patch: dict) -> Workload:
    """The same Workload whose model gets ``patch`` (attribute path -> value) set right
    after it is built, on every rank: how lab.explore tries a fix that lives in the
    person's code (``{"config.use_cache": False}``) without them editing it first."""
    if not isinstance(workload, Workload):
        raise ConfigError("a model patch needs a Workload (a step function builds its own "
                          "model where the lab cannot reach it)")
    if not isinstance(patch, dict) or not patch or not all(
            isinstance(k, str) and k and not k.startswith(".") for k in patch):
        raise ConfigError(f"model patch {patch!r}: give {{'attribute.path': value}}, e.g. "
                          "{'config.use_cache': False}")
    return dataclasses.replace(workload, model=partial(patched_model, workload.model, dict(patch)),
                               name=f"{workload.name} + {patch_text(patch)}")


def patched_model(factory: Callable[[], Any], patch: dict):
    """Build the model with ``factory``, then set each attribute path of ``patch`` on it
    (runs on the engines; an attribute the model lacks is an error naming it, never a
    silently unpatched run)."""
    model = factory()
    for path, value in patch.items():
        obj, *parts = [model] + path.split(".")
        for part in parts[:-1]:
            obj = getattr(obj, part)
        if not hasattr(obj, parts[-1]):
            raise AttributeError(f"model patch {path}={value!r}: {type(obj).__name__} has no "
                                 f"attribute {parts[-1]!r}; this fix does not apply to this model")
        setattr(obj, parts[-1], value)
    return model
