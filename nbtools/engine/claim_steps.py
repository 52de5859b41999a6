"""Engine-side pieces of the claim notebooks: custom step classes that run on the ranks as
``lab.run(step, cfg)`` and record what they measure with ``ctx.report`` (``run.reports``),
and the engine-side log capture the studies of claims/studies.py read. Notebooks reach them
through ``nbtools.tutorial``. Classes, not closures: they travel to the engines by
reference (this module is installed there too) and keep a stable name, hence their state,
across runs."""
from __future__ import annotations

import hashlib
import logging
import time

# -- engine-side log capture ---------------------------------------------------------------
DDP_OPTIMIZER_LOG = "torch._dynamo.backends.distributed"
"""DDPOptimizer logs "... created N buckets" here (INFO): one compiled subgraph per bucket."""
_LOGS: dict = {}
_HANDLERS: dict = {}


class _Collect(logging.Handler):
    def __init__(self, key):
        super().__init__(logging.DEBUG)
        self.key = key

    def emit(self, record):
        try:
            _LOGS.setdefault(self.key, []).append(dict(ts=record.created, level=record.levelname,
                                                       message=record.getMessage()))
        except Exception:   # never break the step for a log line
            pass


def log_start(name: str, level: int) -> None:
    """Start keeping logger ``name``'s records at ``level`` on this engine (read them with
    ``log_stop``)."""
    log = logging.getLogger(name)
    if name not in _HANDLERS:
        h = _Collect(name)
        _HANDLERS[name] = (h, log.level, log.propagate)
        log.addHandler(h)
    log.setLevel(level)
    log.propagate = False      # ours only: INFO lines would otherwise reach stderr


def log_stop(name: str) -> list:
    """Stop keeping logger ``name``'s records; returns the lines kept since ``log_start``."""
    import os
    h, level, propagate = _HANDLERS.pop(name, (None, None, None))
    if h is not None:
        log = logging.getLogger(name)
        log.removeHandler(h)
        log.setLevel(level)
        log.propagate = propagate
    rank = int(os.environ.get("RANK", -1))
    return [dict(rank=rank, **r) for r in _LOGS.pop(name, [])]




# -- engine-side steps -------------------------------------------------------------------
class _Step:
    """A named, picklable step: its name keys the engine-side state across runs."""

    def __init__(self, **params):
        self.params = params
        self.__name__ = type(self).__name__
        self.__qualname__ = self.__name__ + "(" + ", ".join(f"{k}={v!r}" for k, v in params.items()) + ")"

    def __repr__(self):
        return self.__qualname__

    def _rng(self, *key):
        import torch
        g = torch.Generator()
        g.manual_seed(int(hashlib.sha1(repr(key).encode()).hexdigest()[:8], 16))
        return g


def _mlp(d: int, layers: int, seed: int = 0):
    import torch
    torch.manual_seed(seed)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(d, d), torch.nn.GELU()]
    return torch.nn.Sequential(*mods, torch.nn.Linear(d, 1))


class DDPAccumStep(_Step):
    """Gradient accumulation under DDP: ``micro`` forward/backward passes per step, the
    first micro-1 inside ``ddp.no_sync()`` when ``no_sync``, each in a record_function
    range "micro k" (count collectives per range with ``collectives(run, within="micro")``).
    Honours the config's compile / backend / ddp_wrap / optimize_ddp (python_reducer runs
    backward under compiled autograd, as the built-in scenarios do). Small buckets
    (``bucket_cap_mb``) make DDP use several, so DDPOptimizer's graph split shows.
    Reports, per step: the loss, the gradient norm, the largest difference of any
    gradient element between ranks after the synchronising backward (0: in sync; that
    check runs in a range named "check", outside the micro ranges), and DDP's buckets as
    rebuilt after the first iteration (parameter indices, in the order gradients arrived;
    0 is the first layer's weight)."""

    # builds its own DDP from the config: the lab lets these fields through to it
    applies = ("parallel=ddp", "ddp_wrap", "optimize_ddp")

    def __init__(self, micro=4, no_sync=True, bucket_cap_mb=1.0, d=512, layers=4, batch=8):
        super().__init__(micro=micro, no_sync=no_sync, bucket_cap_mb=bucket_cap_mb, d=d,
                         layers=layers, batch=batch)

    def __call__(self, ctx):
        import contextlib
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from nbtools.engine import apply
        p, cfg = self.params, ctx.cfg
        key = ("ddp", cfg.compile, cfg.backend, cfg.ddp_wrap, cfg.optimize_ddp, cfg.dynamic)
        if key not in ctx.state:
            apply.set_optimize_ddp(cfg)
            model = _mlp(p["d"], p["layers"]).to(ctx.device)
            kw = dict(bucket_cap_mb=p["bucket_cap_mb"],
                      device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
            if cfg.compiled and cfg.ddp_wrap == "compile-outside":
                ddp = DDP(model, **kw)
                fwd = ctx.compile(ddp)
            else:
                ddp = DDP(ctx.compile(model), **kw)
                fwd = ddp
            opt = torch.optim.SGD(ddp.parameters(), lr=1e-2)
            # python_reducer: backward under compiled autograd, as the built-in scenarios do
            ctx.state[key] = (ddp, fwd, opt, apply.compiled_backward(cfg))
        ddp, fwd, opt, bwd_ctx = ctx.state[key]
        opt.zero_grad(set_to_none=True)
        for k in range(p["micro"]):
            g = self._rng(ctx.rank, ctx.step, k)
            x = torch.randn(p["batch"], p["d"], generator=g).to(ctx.device)
            y = torch.randn(p["batch"], 1, generator=g).to(ctx.device)
            last = k == p["micro"] - 1
            sync = contextlib.nullcontext() if (last or not p["no_sync"]) else ddp.no_sync()
            with torch.profiler.record_function(f"micro {k}"), sync:
                loss = torch.nn.functional.mse_loss(fwd(x), y)
                with bwd_ctx():
                    loss.backward()
        with torch.profiler.record_function("check"):
            flat = torch.cat([q.grad.flatten() for q in ddp.parameters() if q.grad is not None])
            hi, lo = flat.clone(), flat.clone()
            dist.all_reduce(hi, dist.ReduceOp.MAX)
            dist.all_reduce(lo, dist.ReduceOp.MIN)
            diff = float((hi - lo).abs().max())
        opt.step()
        # DDP re-buckets after its first iteration in the order gradients arrived: a
        # compiled backward hands them over in its own order, which changes the buckets
        # and so the number of all-reduces (empty when the reducer is not used)
        log = ddp._get_ddp_logging_data()
        ctx.report(config=cfg.label(),
                   loss=float(loss), grad_norm=float(flat.norm()), rank_grad_diff=diff,
                   reducer_buckets=" | ".join(b.strip().replace(" ", ",") for b in
                                          str(log.get("rebuilt_per_bucket_param_indices", ""))
                                          .split(",") if b.strip()),
                   reducer_bucket_bytes=str(log.get("rebuilt_bucket_sizes", "")))
        return torch.tensor(diff)


class DtypeProbeStep(_Step):
    """One training step of a small two-stage MLP (up + GELU, then down; each stage compiled
    on its own when compile is on, so the tensor between them is visible) under the
    config's autocast dtype and scope: forward, forward+loss, or step (backward inside
    too). Reports the dtype of what each part produced: the hidden activation, the output,
    the loss, the gradient flowing back into the hidden activation, and the parameters'
    gradients (and the parameters' own dtype)."""

    def __init__(self, d=64, batch=16):
        super().__init__(d=d, batch=batch)

    def __call__(self, ctx):
        import contextlib
        import torch
        p, cfg = self.params, ctx.cfg
        key = ("dtype", cfg.compile, cfg.backend)
        if key not in ctx.state:
            torch.manual_seed(0)
            up = torch.nn.Sequential(torch.nn.Linear(p["d"], 4 * p["d"]), torch.nn.GELU())
            down = torch.nn.Linear(4 * p["d"], p["d"])
            up, down = up.to(ctx.device), down.to(ctx.device)
            params = list(up.parameters()) + list(down.parameters())
            ctx.state[key] = (params, ctx.compile(up), ctx.compile(down),
                              torch.optim.SGD(params, lr=1e-3))
        params, up, down, opt = ctx.state[key]
        scope = cfg.autocast_scope if cfg.autocast != "off" else "none"
        ac, null = ctx.autocast, contextlib.nullcontext
        g = self._rng(ctx.rank, ctx.step)
        x = torch.randn(p["batch"], p["d"], generator=g).to(ctx.device)
        target = torch.randn(p["batch"], p["d"], generator=g).to(ctx.device)
        seen = {}
        opt.zero_grad(set_to_none=True)
        with ac():
            hidden = up(x)
            out = down(hidden)
        hidden.register_hook(lambda gr: seen.__setitem__("grad_hidden", str(gr.dtype)))
        with (ac if scope in ("forward+loss", "step") else null)():
            # Outside autocast a bf16/fp16 output meets the fp32 target: on CUDA (torch 2.11,
            # H200) mse_loss's backward then raised "Found dtype Float but expected
            # BFloat16", so a loss outside autocast needs the cast users write anyway.
            cast = scope == "forward" and out.dtype != target.dtype
            loss = torch.nn.functional.mse_loss(out.float() if cast else out, target)
        with (ac if scope == "step" else null)():
            loss.backward()
        opt.step()
        grads = sorted({str(q.grad.dtype) for q in params if q.grad is not None})
        ctx.report(autocast=cfg.autocast, scope=scope,
                compile=cfg.compile, backend=cfg.backend if cfg.compiled else "-",
                fullgraph=cfg.fullgraph, loss_input_cast=cast,
                hidden=str(hidden.dtype), output=str(out.dtype), loss=str(loss.dtype),
                grad_hidden=seen.get("grad_hidden", "?"), param_grads=", ".join(grads),
                params=str(params[0].dtype))
        return loss.detach().float()


class RankDivergenceStep(_Step):
    """A compiled MLP forward whose input differs between ranks on purpose, to see what
    makes ranks compile different graphs: ``kind="none"`` (same shapes everywhere),
    ``"shape"`` (from step ``at`` on, the last rank gets a smaller batch, like an uneven
    last shard), ``"branch"`` (rank 0 takes an extra op inside the compiled function)."""

    def __init__(self, kind="shape", at=2, d=32, batch=8):
        super().__init__(kind=kind, at=at, d=d, batch=batch)

    def __call__(self, ctx):
        import torch
        p = self.params
        key = ("div", ctx.cfg.compile, ctx.cfg.backend, ctx.cfg.dynamic)
        if key not in ctx.state:
            model = _mlp(p["d"], 2).to(ctx.device)
            extra = p["kind"] == "branch" and ctx.rank == 0

            def forward(x):
                y = model(x)
                return y * 2 + 1 if extra else y
            ctx.state[key] = ctx.compile(forward)
        fn = ctx.state[key]
        b = p["batch"]
        if p["kind"] == "shape" and ctx.rank == ctx.world_size - 1 and ctx.step >= p["at"]:
            b = max(1, b // 2)
        x = torch.randn(b, p["d"], generator=self._rng(ctx.step)).to(ctx.device)
        with torch.no_grad():
            return fn(x).sum()


class CompileCacheStep(_Step):
    """Each step is one cold start: fresh Dynamo state and a fresh, empty inductor cache
    (torch._inductor.utils.fresh_cache), then compile and run a small model's forward and
    backward. ``share=False``: every rank compiles alone. ``share=True``: rank 0 compiles,
    saves its artefacts (torch.compiler.save_cache_artifacts), broadcasts them, and the
    other ranks load them (load_cache_artifacts) before compiling. All ranks start each
    cold start together (a barrier), so a rank's ``ready_s`` includes waiting for rank 0.
    The report splits it into parts and counts FX-graph cache hits/misses."""

    def __init__(self, share=False, d=64, layers=2, batch=8):
        super().__init__(share=share, d=d, layers=layers, batch=batch)

    def __call__(self, ctx):
        import torch
        import torch.distributed as dist
        from torch._dynamo.utils import counters
        from torch._inductor import utils as iu
        fresh = getattr(iu, "fresh_cache", None) or iu.fresh_inductor_cache
        p = self.params
        torch._dynamo.reset()
        dist.barrier()            # every rank starts its cold start together, as a job does
        t0 = time.perf_counter()
        waited = loaded = 0.0
        size = 0
        with fresh():
            _clear_cache_artifacts()
            c0 = dict(counters["inductor"])
            if p["share"] and ctx.rank != 0:
                box = [None]
                t = time.perf_counter()
                dist.broadcast_object_list(box, src=0)
                waited = time.perf_counter() - t
                t = time.perf_counter()
                if box[0]:
                    torch.compiler.load_cache_artifacts(box[0])
                    size = len(box[0])
                loaded = time.perf_counter() - t
            t = time.perf_counter()
            model = _mlp(p["d"], p["layers"]).to(ctx.device)
            x = torch.randn(p["batch"], p["d"], generator=self._rng(ctx.step)).to(ctx.device)
            torch.compile(model, backend="inductor")(x).sum().backward()
            if ctx.device.type == "cuda":
                torch.cuda.synchronize()
            compile_s = time.perf_counter() - t
            if p["share"] and ctx.rank == 0:
                art = torch.compiler.save_cache_artifacts()
                blob = art[0] if art else b""
                size = len(blob)
                dist.broadcast_object_list([blob], src=0)
            hits = counters["inductor"].get("fxgraph_cache_hit", 0) - c0.get("fxgraph_cache_hit", 0)
            miss = counters["inductor"].get("fxgraph_cache_miss", 0) - c0.get("fxgraph_cache_miss", 0)
        ctx.report(share=p["share"],
                ready_s=time.perf_counter() - t0, waited_for_rank0_s=waited, load_s=loaded,
                compile_s=compile_s, fx_hits=hits, fx_misses=miss, artifact_bytes=size)
        return torch.zeros(())


def _clear_cache_artifacts() -> None:
    """save_cache_artifacts returns everything recorded since the process started; start
    each cold start with an empty record (private API, guarded)."""
    try:
        from torch.compiler._cache import CacheArtifactManager
        CacheArtifactManager.clear()
    except Exception:
        pass


