"""Engine side: the one readable place where a StepConfig is applied to a workload (a
built-in scenario or a user's, both a ``Built``), in the order parallel -> compile ->
autocast -> cudagraph, and the step function is made."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from nbtools.config.engine_notes import NO_BLOCKS_NOTE
from nbtools.config.step_config import ConfigError, StepConfig
from nbtools.engine.materialize import Built, output_tensor, tp_parallelize
from nbtools.engine.optimizer_remake import remade
from nbtools.engine import workload_errors as blame

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
_OPTIMIZE_DDP = {"ddp_optimizer": "ddp_optimizer", "python_reducer": "python_reducer", "off": False}


@dataclass
class Prepared:
    """A scenario with every toggle applied (parallel, compile, autocast, CUDA graph): the
    step to time, the module it calls, its optimizer, an eager forward for ``check``, and
    notes the run reports."""
    step: Callable            # (inputs, target) -> loss or output (detached)
    module: torch.nn.Module   # what the step calls (wrapped)
    optimizer: Optional[torch.optim.Optimizer]
    eager_forward: Callable   # (inputs, target) -> same as step's result, eager, no update
    notes: tuple = ()         # what the run must report (e.g. how compile was applied)


def compile_kwargs(cfg: StepConfig) -> dict:
    """torch.compile's arguments for cfg: every compile in a run (the scenarios', a custom
    step's ctx.compile, the claim steps') takes them from here."""
    kw = dict(backend=cfg.backend, fullgraph=cfg.fullgraph,
              dynamic={"auto": None, "static": False, "dynamic": True, "mark": None}[cfg.dynamic])
    if cfg.compile != "default":
        kw["mode"] = cfg.compile
    return kw


def set_optimize_ddp(cfg: StepConfig) -> None:
    """torch._dynamo.config.optimize_ddp as cfg asks (a process-wide setting: set at every
    compiled build, so one run's choice never leaks into the next)."""
    if cfg.compiled:
        torch._dynamo.config.optimize_ddp = _OPTIMIZE_DDP[cfg.optimize_ddp]


def compiled_backward(cfg: StepConfig) -> Callable:
    """The context factory backward runs under: compiled autograd for a compiled
    optimize_ddp='python_reducer' run (StepConfig allows that under DDP only), compiled with
    the forward's settings (dynamic included) but fullgraph, which compiled autograd does
    not take; else a null context."""
    if not (cfg.compiled and cfg.optimize_ddp == "python_reducer"):
        return contextlib.nullcontext
    from torch._dynamo import compiled_autograd
    kw = {k: v for k, v in compile_kwargs(cfg).items() if k != "fullgraph"}
    return lambda: compiled_autograd._enable(torch.compile(**kw))


def range_ctx(name: str):
    """record_function (profiler timeline) + NVTX (Nsight Systems): same structure in both."""
    return _Ranges(name)


class _Ranges(contextlib.ContextDecorator):
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.rf = torch.profiler.record_function(self.name)
        self.rf.__enter__()
        _nvtx_push(self.name)
        return self

    def __exit__(self, *exc):
        _nvtx_pop()
        self.rf.__exit__(*exc)
        return False


try:  # the nvtx package works without CUDA; torch.cuda.nvtx needs a CUDA build
    import nvtx as _nvtx

    def _nvtx_push(name):
        _nvtx.push_range(name, domain="nbtools")

    def _nvtx_pop():
        _nvtx.pop_range(domain="nbtools")
except Exception:  # pragma: no cover - nvtx is a declared dependency
    def _nvtx_push(name):
        pass

    def _nvtx_pop():
        pass


def autocast_ctxs(cfg: StepConfig, device: torch.device):
    """(forward, loss, backward) contexts for the chosen autocast scope."""
    if cfg.autocast == "off":
        null = contextlib.nullcontext
        return null, null, null
    ac = lambda: torch.autocast(device.type, dtype=AUTOCAST_DTYPES[cfg.autocast])  # noqa: E731
    null = contextlib.nullcontext
    scope = cfg.autocast_scope
    return ac, (ac if scope in ("forward+loss", "step") else null), (ac if scope == "step" else null)


def apply_parallel_and_compile(cfg: StepConfig, wl: Built, device, group, cache: dict):
    """Wrap for the strategy and compile. The order differs per strategy on purpose:
    DDP offers both wrapping orders (torch.compile(DDP(m)) breaks the graph in DDP's forward
    and compiles the model's forward whole, without DDP's per-bucket split; the run flags it); FSDP2 compiles each block before fully_shard, as torchtitan does,
    because FSDP2's hooks are Dynamo-disabled (graph boundaries at the hooks)."""
    par = cfg.resolved_parallel
    model = wl.model
    notes = []
    kw = compile_kwargs(cfg) if cfg.compiled else None
    set_optimize_ddp(cfg)
    if par == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        ddp_kw = dict(device_ids=[device.index] if device.type == "cuda" else None)
        if cfg.compiled and cfg.ddp_wrap == "compile-outside":
            module = torch.compile(DDP(model, **ddp_kw), **kw)
            notes.append("torch.compile(DDP(model))")
        elif cfg.compiled:
            module = DDP(torch.compile(model, **kw), **ddp_kw)
            notes.append("DDP(torch.compile(model))")
        else:
            module = DDP(model, **ddp_kw)
        if cfg.optimize_ddp == "python_reducer" and cfg.compiled:
            notes.append("backward under compiled autograd (python_reducer)")
    elif par == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        blocks = list(wl.blocks(model)) if wl.blocks is not None else []
        per_block = cfg.compiled and cfg.fsdp_compile == "per-block"
        if per_block:
            for b in blocks:             # in place (nn.Module.compile): no _orig_mod prefix
                b.compile(**kw)
            notes.append(f"{len(blocks)} blocks compiled, then fully_shard per block")
        if not cache.get("sharded"):
            shard = dict(mesh=cache.get("mesh"), reshard_after_forward=cfg.reshard_after_forward)
            for b in blocks:
                fully_shard(b, **shard)
            fully_shard(model, **shard)
            cache["sharded"] = True
        module = model
        if cfg.compiled and not per_block:
            module = torch.compile(model, **kw)
            notes.append(f"fully_shard per block ({len(blocks)}), then the whole model compiled")
        if not blocks:
            notes.append(NO_BLOCKS_NOTE)
        if not cfg.reshard_after_forward:
            notes.append("reshard_after_forward=False: gathered parameters kept for backward")
    elif par in ("tp", "none"):
        if par == "tp" and not cache.get("parallelized"):
            wl.model = model = tp_parallelize(wl, cache["mesh"])
            cache["parallelized"] = True
        module = torch.compile(model, **kw) if cfg.compiled else model
    else:  # pragma: no cover - validated in StepConfig
        raise ConfigError(f"parallel={par!r}")
    return module, tuple(notes)


def make_step(cfg: StepConfig, wl: Built, module, optimizer, device) -> tuple[Callable, Callable]:
    """(step, eager_forward). step runs one full step; eager_forward recomputes the first
    step's result eagerly (compilation off) for check=True."""
    fwd_ac, loss_ac, bwd_ac = autocast_ctxs(cfg, device)
    mark = cfg.dynamic == "mark" and cfg.compiled

    def forward(inputs):
        if mark:
            for i, dim in wl.dynamic_dims:
                torch._dynamo.mark_dynamic(inputs[i], dim)
        with range_ctx("forward"), fwd_ac():
            try:
                return module(*inputs)
            except (TypeError, RuntimeError, ValueError, IndexError) as e:
                if not blame.blames_batch(e, inputs):
                    raise
                raise blame.forward_failed(e, inputs) from e

    if not wl.train:
        def step(inputs, target):
            with torch.no_grad():
                return output_tensor(forward(inputs))

        def eager_forward(inputs, target, full=False):
            with torch.no_grad(), torch.compiler.set_stance("force_eager"), \
                    (contextlib.nullcontext() if full else fwd_ac()):
                return output_tensor(module(*inputs))
        return step, eager_forward

    backward_ctx = compiled_backward(cfg)
    optimizer_step = compiled_optimizer_step(optimizer, cfg)

    def step(inputs, target):
        optimizer.zero_grad(set_to_none=True)
        out = forward(inputs)
        with range_ctx("loss"), loss_ac():
            try:
                loss = wl.loss_fn(out, target)
            except (TypeError, RuntimeError, ValueError, IndexError) as e:
                if not blame.blames_loss(e):
                    raise
                raise blame.loss_failed(e, out, target) from e
        blame.check_loss(loss)
        with range_ctx("backward"), bwd_ac(), backward_ctx():
            loss.backward()
        with range_ctx("optimizer"):
            optimizer_step()
        return loss.detach()

    def eager_forward(inputs, target, full=False):
        # full: no autocast (the caller sets full fp32 matmuls): the reference a precision
        # change is measured against
        with torch.no_grad(), torch.compiler.set_stance("force_eager"):
            with contextlib.nullcontext() if full else fwd_ac():
                out = module(*inputs)
            with contextlib.nullcontext() if full else loss_ac():
                return wl.loss_fn(out, target)
    return step, eager_forward


def apply_cudagraph(cfg: StepConfig, step: Callable, example, device) -> Callable:
    """cudagraph='manual': capture the whole step once (after warm-up on a side stream, as
    the CUDA Graphs docs require) and replay it; inputs are copied into static buffers."""
    if cfg.cudagraph != "manual":
        return step
    inputs, target = example
    static_in = [t.clone() for t in inputs]
    static_target = target.clone() if target is not None else None
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step(static_in, static_target)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = step(static_in, static_target)

    def replay(inputs, target):
        for dst, src in zip(static_in, inputs):
            dst.copy_(src)
        if static_target is not None:
            static_target.copy_(target)
        graph.replay()
        return static_out
    return replay


def make_optimizer(wl: Built, module, impl: str = "as-built") -> Optional[torch.optim.Optimizer]:
    """The Workload's optimizer, else the built-in scenarios' one; ``impl`` foreach or fused
    remakes it with that implementation (StepConfig.optimizer_impl)."""
    if not wl.train:
        return None
    if wl.optimizer is not None:
        opt = wl.optimizer(module.parameters())
    else:
        opt = torch.optim.SGD(_param_groups(module), lr=1e-3, momentum=0.9)
    return remade(opt, impl) if impl in ("foreach", "fused") else opt


def compiled_optimizer_step(optimizer, cfg: StepConfig) -> Callable:
    """optimizer.step, or under optimizer_impl='compiled' that step compiled (PyTorch's
    compiled-optimizer recipe: a function calling step, under torch.compile; inductor
    unless the config compiles with another backend)."""
    if optimizer is None or cfg.optimizer_impl != "compiled":
        return optimizer.step if optimizer is not None else (lambda: None)
    backend = cfg.backend if cfg.compiled else "inductor"

    @torch.compile(backend=backend, fullgraph=False)
    def step():
        optimizer.step()
    return step


def _param_groups(module) -> list:
    """DTensor and plain parameters in separate groups: a TP plan shards some layers and
    leaves the rest (embeddings, norms) plain, and the foreach kernels a CUDA optimizer step
    uses refuse a group that mixes them ("got mixed torch.Tensor and DTensor": Llama under
    parallel='tp' on 2 x H200; CPU steps do not use foreach and never showed it)."""
    from torch.distributed.tensor import DTensor
    params = [p for p in module.parameters() if p.requires_grad]
    groups = [[p for p in params if isinstance(p, DTensor)],
              [p for p in params if not isinstance(p, DTensor)]]
    return [{"params": g} for g in groups if g]
