"""Engine side: one EngineState per engine process, reused across runs.

The client calls these module functions through ipyparallel; they return plain data only
(numbers, strings, numpy arrays). Nothing here imports bokeh or ipywidgets.
"""
from __future__ import annotations

import os
import socket
import threading
import time
import traceback
import warnings
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Callable, Optional

from nbtools.config.step_config import StepConfig

# Fields that do not change what is built: changing only these reuses all state.
# (torch_trace is not one: turning it on rebuilds, so the trace holds the compiles.)
_RUN_ONLY = ("warmup", "steps", "profiled", "capture", "check", "cache")
# Fields that change the weights, optimizer and inputs (everything else changes wrappers).
_MODEL = ("scenario", "parallel", "size", "batch", "seq_len", "seq_schedule", "seed",
          # fully_shard is applied once per model, and per-block compile changes the blocks
          # in place: either choice needs a fresh model
          "reshard_after_forward", "fsdp_compile")
# Of those, the ones that change only the inputs: under cache="continue" the same model
# (weights, optimizer, compiled code) meets the new inputs, as a served model meets a new
# batch size. Rebuilding it instead would hand the compiler a new module and the CUDA-graph
# trees new static inputs, which is not the experiment.
_INPUTS_ONLY = ("batch",)


@dataclass
class EngineState:
    rank: int = -1
    world: int = 0
    device: object = None
    group: object = None
    store: object = None
    listener: object = None      # rank 0's store socket between listen() and setup()
    generation: int = 0
    pg_timeout: float = 300.0
    pg_broken: bool = False
    recorder: object = None
    model_key: tuple = ()
    build_key: tuple = ()
    workload: object = None
    prepared: object = None
    cache: dict = field(default_factory=dict)     # strategy state kept with the weights
    custom_state: dict = field(default_factory=dict)
    reports: list = field(default_factory=list)   # ctx.report() rows of the current run
    run_count: int = 0
    model_built_at: int = -1     # the engine's run count when the current weights were built


_S = EngineState()


def info() -> dict:
    """What this engine is, read before ranks are assigned (ids follow registration order)."""
    import torch
    cuda = torch.cuda.is_available()
    return dict(host=socket.gethostname(), pid=os.getpid(),
                local_rank=int(os.environ.get("NBTOOLS_LOCAL_RANK", os.environ.get("LOCAL_RANK", -1))),
                cuda_visible=os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                device_type="cuda" if cuda else "cpu",
                device_name=torch.cuda.get_device_name(0) if cuda else "cpu",
                gpus=torch.cuda.device_count() if cuda else 0, cpus=os.cpu_count(),
                torch=torch.__version__)


def listen(addr: str) -> int:
    """Rank 0: open the store's listening socket on exactly ``addr`` (TCPStore alone
    binds every interface); setup() hands it over. Returns the port for the other ranks."""
    if _S.listener is not None:
        _S.listener.close()
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    host = socket.getaddrinfo(addr, None, family, socket.SOCK_STREAM)[0][4][0]
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, 0))
    s.listen(512)
    _S.listener = s
    return s.getsockname()[1]


def setup(rank: int, world: int, master_addr: str, port: int, threads: int,
          cache_dir: str, pg_timeout_s: float) -> dict:
    """Join the process group. Rank 0 hosts the store; the same store carries the failure
    flag that lets a failing rank release its peers. Called again on a surviving engine
    when the lab swaps a spare in for another rank: it leaves its old group first."""
    import torch
    import torch.distributed as dist
    t0 = time.perf_counter()
    if dist.is_initialized():
        # the lab is swapping in a spare for a dead or stuck peer: an orderly destroy
        # waits on that peer (5 s on gloo), an abort does not
        _bounded(_abort, 5.0)
        _S.group, _S.prepared, _S.build_key, _S.model_key = None, None, (), ()
        _S.custom_state.clear()
        _S.cache.clear()
    if threads > 0:
        torch.set_num_threads(threads)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir   # own cache per rank: cold means cold
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR=master_addr,
                      MASTER_PORT=str(port))
    _loopback_transport(master_addr)
    cuda = torch.cuda.is_available()
    _S.device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(_S.device)
    _S.rank, _S.world = rank, world
    kw = {}
    if rank == 0 and _S.listener is not None:
        kw["master_listen_fd"] = _S.listener.detach()    # the store owns the fd from here
        _S.listener = None
    t1 = time.perf_counter()
    _S.store = dist.TCPStore(master_addr, port, world, is_master=rank == 0,
                             timeout=timedelta(seconds=pg_timeout_s), **kw)
    _S.pg_timeout = pg_timeout_s
    _S.generation = 0      # a new store: every rank, spare or survivor, counts from here
    t2 = time.perf_counter()
    _init_pg()
    t3 = time.perf_counter()
    if _S.recorder is None:
        from nbtools.engine.compile_recorder import CompileRecorder
        _S.recorder = CompileRecorder()
    _S.recorder.install()
    return dict(rank=rank, backend=dist.get_backend(), leave_s=t1 - t0, store_s=t2 - t1,
                group_s=t3 - t2)


def _loopback_transport(master_addr: str) -> None:
    """One host: gloo's and NCCL's own sockets on loopback too (by default they pick the
    host's first interface and listen there). A user's choice of interface stands."""
    import ipaddress
    try:
        if not ipaddress.ip_address(master_addr).is_loopback:
            return
    except ValueError:
        return
    import psutil
    lo = next((name for name, addrs in psutil.net_if_addrs().items()
               if any(a.address == master_addr for a in addrs)), None)
    if lo:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", lo)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", lo)


def _init_pg() -> None:
    import torch.distributed as dist
    _S.generation += 1
    store = dist.PrefixStore(f"nbtools/{_S.generation}", _S.store)
    backend = "nccl" if _S.device.type == "cuda" else "gloo"
    kw = dict(device_id=_S.device) if _S.device.type == "cuda" else {}
    dist.init_process_group(backend, store=store, rank=_S.rank, world_size=_S.world,
                            timeout=timedelta(seconds=_S.pg_timeout), **kw)
    _S.group = dist.group.WORLD
    _S.pg_broken = False


def reinit_pg() -> int:
    """After a failed run aborted the group: a fresh one on the same store, all ranks.
    Used on gloo; NCCL engines are restarted instead (re-initialising after an abort was
    not reliable on H200 / torch 2.11)."""
    import torch.distributed as dist
    if dist.is_initialized():
        _bounded(dist.destroy_process_group, 10.0)
    _init_pg()
    _S.prepared, _S.build_key, _S.model_key = None, (), ()   # wrappers hold the old group
    _S.cache.clear()
    return _S.generation


def shutdown(timeout_s: float = 10.0) -> bool:
    """Teardown, bounded: destroy_process_group has been seen to hang after
    reduce-overhead with functional collectives."""
    import torch.distributed as dist
    if dist.is_initialized():
        return _bounded(dist.destroy_process_group, timeout_s)
    return True


def _bounded(fn, timeout_s) -> bool:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    t.join(timeout_s)
    return not t.is_alive()


# -- one run -----------------------------------------------------------------------------
def run(cfg: StepConfig, run_id: str, user_fn: Optional[Callable] = None) -> dict:
    """Run warm-up, measured and profiled steps. Never raises: a failure comes back as
    status='failed' with the traceback, after aborting the group so peers stop waiting."""
    from nbtools.engine import progress
    t_start = time.time_ns()
    progress.publish("start", run_id=run_id)
    out = dict(rank=_S.rank, status="ok", error="", run_id=run_id)
    failed, caught = False, []
    trace_dir = None
    try:
        if cfg.torch_trace:
            from nbtools.engine import torch_trace
            trace_dir = torch_trace.start(_S.rank, run_id)
        if _S.pg_broken:
            raise RuntimeError("process group is broken after an earlier failure; the lab "
                               "re-initialises it before the next run")
        with warnings.catch_warnings(record=True) as caught:
            # Library warnings (DDP's "Grad strides do not match bucket view strides" on
            # every compiled ddp-train run) come back as data, shown folded by the client,
            # instead of a red stderr block per rank. Once per place, as Python's default.
            warnings.simplefilter("default")
            out.update(_run(cfg, run_id, user_fn))   # _run unpickles a user's step/Workload
    except BaseException as e:  # noqa: BLE001 - everything goes back to the client
        out.update(status="failed", error=_describe(e), error_type=type(e).__name__)
        failed = True
    finally:
        if _S.recorder is not None:
            _S.recorder.set_step(-1)
        if trace_dir is not None:     # a failed run's compile log is worth the most
            out["torch_trace"] = torch_trace.stop(_S.rank, trace_dir)
    if failed:   # outside the except block: the traceback no longer pins the group
        user_fn = None
        _release_peers(run_id, out["error"])
    out["warnings"] = _warning_rows(caught)
    out["engine_s"] = (time.time_ns() - t_start) / 1e9
    progress.publish("done", run_id=run_id)
    return out


def _warning_rows(caught) -> list:
    """Each distinct warning once: category, message, where it was raised."""
    rows, seen = [], set()
    for w in caught:
        key = (w.category.__name__, str(w.message))
        if key not in seen:
            seen.add(key)
            rows.append(dict(category=key[0], message=key[1],
                             where=f"{w.filename}:{w.lineno}"))
    return rows


def _describe(e: BaseException) -> str:
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    head = f"{type(e).__name__}: {e}"
    if "out of memory" in str(e).lower():
        head = f"CUDA out of memory on this rank: {e}"
    return head + "\n" + tb[-4000:]


def _release_peers(run_id: str, error: str) -> None:
    """Mark the failure in the store, then abort our communicators: a gloo peer blocked in
    a collective with us gets 'connection closed' at once instead of waiting for the
    timeout; NCCL peers are told through the store by their own watcher."""
    import torch.distributed as dist
    # The state built on this group (models, DDP, TP blocks) goes first: it holds the group,
    # and gloo closes its connections, which is what releases a peer blocked in a
    # collective with us, only when the group is freed. References from inside torch can
    # still keep it alive, so the client also restarts ranks left waiting (cluster.py).
    _S.group, _S.build_key, _S.model_key = None, (), ()
    _S.custom_state.clear()
    _release_model()
    try:
        _S.store.set(f"failed/{run_id}", f"rank {_S.rank}: {error.splitlines()[0][:300]}")
    except Exception:
        pass
    if dist.is_initialized():
        # Bounded: on NCCL the abort itself was seen to block for the PG timeout (H200,
        # torch 2.11) after it had already released the peer; the lab restarts CUDA engines
        # after a failure anyway.
        _bounded(_abort, 5.0)
    _S.pg_broken = True


def _abort() -> None:
    import torch.distributed as dist
    try:
        dist.distributed_c10d._abort_process_group()
    except Exception:
        dist.destroy_process_group()


class _PeerWatch:
    """While a run is in flight, poll the store for a peer's failure flag; on NCCL, abort our
    communicators so a collective waiting on the failed peer returns."""

    def __init__(self, run_id):
        self.run_id, self.stop, self.peer_error = run_id, threading.Event(), None

    def __enter__(self):
        if _S.world > 1:
            self.t = threading.Thread(target=self._loop, daemon=True)
            self.t.start()
        return self

    def _loop(self):
        import torch.distributed as dist
        key = f"failed/{self.run_id}"
        while not self.stop.wait(0.25):
            try:
                if _S.store.check([key]):
                    self.peer_error = _S.store.get(key).decode()
                    if _S.device.type == "cuda" and dist.is_initialized():
                        _S.pg_broken = True
                        _abort()     # frees a sync waiting on the failed peer (~1 s on H200)
                    return
            except Exception:
                return

    def __exit__(self, *exc):
        self.stop.set()
        return False


def _run(cfg: StepConfig, run_id: str, user_fn) -> dict:
    import torch
    from nbtools.engine import capture
    from nbtools.analysis.compile_counts import outcome
    cfg.check_device(_S.device.type)
    from nbtools.config.workload import from_payload
    user_fn, source_key = from_payload(user_fn)   # keyed on the bytes: no stale code
    rec = _S.recorder
    rec.install()
    rec.start_run()
    notes, reused = _prepare(cfg, user_fn, source_key)
    wl, prep = _S.workload, _S.prepared
    dev = _S.device
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    check = None
    with _PeerWatch(run_id) as watch:
        batches = {}

        def batch(i):
            if i not in batches:
                batches.clear()
                batches[i] = wl.make_batch(i)
            return batches[i]

        if cfg.check:
            check = _check(prep, batch(0))
        _S.reports.clear()     # the same list object the custom step's ctx appends to
        timings = capture.run_steps(cfg, prep.step, batch, dev, rec, _S.rank)
        if watch.peer_error:
            raise RuntimeError(f"stopped because a peer failed ({watch.peer_error})")
    result = dict(timings)
    compile_wire = rec.finish_run(_S.rank)
    result.update(
        compile=compile_wire, notes=list(notes), reused=reused, check=check,
        compile_outcome=outcome(compile_wire["counts"], cfg.compiled, reused),
        model_built_at=_S.model_built_at,
        peak_mem_mb=(torch.cuda.max_memory_allocated() / 2**20) if cuda else float("nan"),
        rss_mb=_rss_mb(), items_per_step=_items_per_step(wl, cfg), flops_per_step=wl.flops_per_step,
        shapes=wl.shapes(0), unused=list(cfg.unused_on(dev.type)),
        env=_env(), host=socket.gethostname(), reports=list(_S.reports))
    _S.run_count += 1
    return result


def _prepare(cfg: StepConfig, user_fn, source_key: str = "") -> tuple[tuple, bool]:
    """Build or reuse state. Returns (notes, reused)."""
    import torch
    from nbtools.engine import apply
    from nbtools.engine import scenarios
    from nbtools.engine.custom_step import prepare_custom
    from nbtools.config.workload import Workload
    from nbtools.engine.materialize import materialize, param_count
    model_key = tuple(getattr(cfg, k) for k in _MODEL) + (source_key,)
    build_key = tuple((k, v) for k, v in cfg.to_dict().items() if k not in _RUN_ONLY)
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
        _release_model()
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
        return built
    if (not fresh and _S.workload is not None and model_key != _S.model_key
            and _only_inputs_differ(model_key, _S.model_key)):
        _S.workload = build(model=_S.workload.model)
    elif fresh or model_key != _S.model_key or _S.workload is None:
        _release_model()
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
        _S.cache["optimizer"] = apply.make_optimizer(wl, module)
    opt = _S.cache["optimizer"]
    step, eager_forward = apply.make_step(cfg, wl, module, opt, _S.device)
    if cfg.cudagraph == "manual":
        step = apply.apply_cudagraph(cfg, step, wl.make_batch(0), _S.device)
    _S.prepared = apply.Prepared(step, module, opt, eager_forward, notes)
    _S.build_key, _S.model_key = build_key, model_key
    return notes, False


def _release_model() -> None:
    """Drop the previous model, optimizer and compiled step before building the next.
    Compiled and FSDP2-wrapped modules sit in reference cycles, so without a collection
    the old model and its optimizer state stayed allocated and counted in the next run's
    peak memory (on H200 the peak of notebook 04's FSDP2 runs grew run after run)."""
    import gc
    _S.prepared = _S.workload = None
    _S.cache.clear()
    gc.collect()
    if _S.device is not None and _S.device.type == "cuda":
        import torch
        torch.cuda.empty_cache()


def _only_inputs_differ(new: tuple, old: tuple) -> bool:
    return all(a == b for k, a, b in zip(_MODEL, new, old) if k not in _INPUTS_ONLY) \
        and new[len(_MODEL):] == old[len(_MODEL):]


def _items_per_step(wl, cfg) -> float:
    """Mean real items of the measured steps (varying sequence lengths: tokens actually
    processed, padding excluded), so items_per_s is real throughput."""
    if wl.items_at is None:
        return wl.items_per_step
    measured = range(cfg.warmup, cfg.warmup + cfg.steps)
    return sum(wl.items_at(i) for i in measured) / max(1, len(measured))


def _check(prep, batch) -> dict:
    """First step's result, compiled vs eager on the same inputs and weights."""
    import torch
    inputs, target = batch
    ref = prep.eager_forward(inputs, target)
    got = prep.step(inputs, target)
    # The step above was a real step (it updated the weights under training); it counts as
    # the first warm-up step, which is why check runs before warm-up.
    a, b = got.detach().float(), ref.detach().float()
    diff = (a - b).abs().max().item() if a.numel() else 0.0
    scale = b.abs().max().item() or 1.0
    return dict(max_abs=diff, max_rel=diff / scale, finite=bool(torch.isfinite(a).all()),
                what="loss" if a.numel() == 1 else f"output{tuple(a.shape)}")


def _rss_mb() -> float:
    try:
        import psutil
        return psutil.Process().memory_info().rss / 2**20
    except Exception:
        return float("nan")


def _env() -> dict:
    import platform
    import torch
    env = dict(torch=torch.__version__, python=platform.python_version(),
               device=str(_S.device), world_size=_S.world)
    if _S.device.type == "cuda":
        env.update(cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0),
                   nccl=".".join(map(str, torch.cuda.nccl.version())))
    else:
        env.update(cpu=platform.processor() or platform.machine(), threads=torch.get_num_threads())
    return env
