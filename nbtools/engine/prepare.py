"""Build or reuse an engine's state for a config: which fields rebuild the model, which
only the wrappers, which nothing; the workload (a built-in scenario, a user's Workload or
custom step) made real and every toggle applied to it (apply.py)."""
from __future__ import annotations

from nbtools.config.step_config import RUN_ONLY as _RUN_ONLY, StepConfig
from nbtools.engine.state import S as _S

# _RUN_ONLY: fields that do not change what is built: changing only these reuses all state.
# (torch_trace is not one: turning it on rebuilds, so the trace holds the compiles.)
# Fields that change the weights, optimizer and inputs (everything else changes wrappers).
_MODEL = ("scenario", "parallel", "size", "batch", "seq_len", "seq_schedule", "seed",
          # fully_shard is applied once per model, and per-block compile changes the blocks
          # in place: either choice needs a fresh model
          "reshard_after_forward", "fsdp_compile",
          # another optimizer: a fresh one from the first step, as a job would start with
          "optimizer_impl",
          # channels_last converts the weights (and the inputs): a model of its own
          "memory_format")
# Of those, the ones that change only the inputs: under cache="continue" the same model
# (weights, optimizer, compiled code) meets the new inputs, as a served model meets a new
# batch size. Rebuilding it instead would hand the compiler a new module and the CUDA-graph
# trees new static inputs, which is not the experiment.
_INPUTS_ONLY = ("batch",)


def _build_key(cfg: StepConfig) -> tuple:
    """Every field but the run-only ones: what is built (and compiled) for a config."""
    return tuple((k, v) for k, v in cfg.to_dict().items() if k not in _RUN_ONLY)


def state_key(cfg: StepConfig, source_key: str = "") -> tuple:
    """What a run's graphs are compiled for, hashable: its code and its build fields."""
    return source_key, repr(_build_key(cfg))


def prepare(cfg: StepConfig, user_fn, source_key: str = "") -> tuple[tuple, bool]:
    """Build or reuse state. Returns (notes, reused)."""
    import torch
    from nbtools.engine import apply
    from nbtools.engine import scenarios
    from nbtools.engine.custom_step import prepare_custom
    from nbtools.config.workload import Workload
    from nbtools.engine.materialize import materialize, param_count
    from nbtools.engine.precision import to_channels_last
    from nbtools.config.engine_notes import OPTIMIZER_NOTE
    model_key = tuple(getattr(cfg, k) for k in _MODEL) + (source_key,)
    build_key = _build_key(cfg)
    if _S.prepared is not None and build_key == _S.build_key and model_key == _S.model_key:
        return _S.prepared.notes, True
    fresh = cfg.cache == "fresh"
    if fresh:
        # Each config measured on its own: Dynamo's caches go, and reset() also drops the
        # compile callbacks, so the recorder hooks go back in.
        torch.compiler.reset()
        _S.recorder.install()
    user_wl = user_fn if isinstance(user_fn, Workload) else None
    if user_fn is not None and user_wl is None:
        _S.release_model()
        _S.workload, _S.prepared = prepare_custom(user_fn, cfg, _S, source_key)
        _S.build_key, _S.model_key = build_key, model_key
        return _S.prepared.notes, False

    def build(model=None):
        if user_wl is not None:
            built = materialize(user_wl, cfg, _S.device, model)
        else:
            built = scenarios.build(cfg, _S.device, _S.rank, _S.world, _S.group, model=model)
        if cfg.resolved_parallel == "tp":      # the ranks share one batch: a share each
            built.flops_per_step /= _S.world
        if cfg.memory_format == "channels_last":
            to_channels_last(built)
        return built
    if (not fresh and _S.workload is not None and model_key != _S.model_key
            and _only_inputs_differ(model_key, _S.model_key)):
        _S.workload = build(model=_S.workload.model)
    elif fresh or model_key != _S.model_key or _S.workload is None:
        _S.release_model()
        if cfg.resolved_parallel in ("fsdp2", "tp"):
            from torch.distributed.device_mesh import init_device_mesh
            _S.cache["mesh"] = init_device_mesh(_S.device.type, (_S.world,))
        _S.workload = build()
        _S.model_built_at = _S.run_count
        _S.cache["optimizer"] = None
    wl = _S.workload
    module, notes = apply.apply_parallel_and_compile(cfg, wl, _S.device, _S.group, _S.cache)
    if user_wl is not None:
        notes = (f"workload {user_wl.name}: {param_count(wl.model):,} parameters on this "
                 "rank",) + notes
    if _S.cache.get("optimizer") is None:
        _S.cache["optimizer"] = apply.make_optimizer(wl, module, cfg.optimizer_impl)
    opt = _S.cache["optimizer"]
    if opt is not None:        # the advice reads it back (config/engine_notes.py)
        notes = tuple(notes) + (OPTIMIZER_NOTE + type(opt).__name__,)
    step, eager_forward = apply.make_step(cfg, wl, module, opt, _S.device)
    if cfg.cudagraph == "manual":
        step = apply.apply_cudagraph(cfg, step, wl.make_batch(0), _S.device)
    _S.prepared = apply.Prepared(step, module, opt, eager_forward, notes)
    _S.build_key, _S.model_key = build_key, model_key
    return notes, False


def _only_inputs_differ(new: tuple, old: tuple) -> bool:
    return all(a == b for k, a, b in zip(_MODEL, new, old) if k not in _INPUTS_ONLY) \
        and new[len(_MODEL):] == old[len(_MODEL):]
