"""One run on an engine: warm-up, measured and profiled steps of the prepared state, and
what comes back (timings, compile records, memory, environment), as plain data.

The client calls ``run`` through ipyparallel; nothing here imports bokeh or ipywidgets.
"""
from __future__ import annotations

import inspect
import socket
import time
import traceback
import warnings
from typing import Callable, Optional

from nbtools.config.step_config import StepConfig
from nbtools.engine.prepare import prepare, state_key
from nbtools.engine.process_group import PeerWatch, release_peers
from nbtools.engine.precision import matmul_precision
from nbtools.engine.state import S as _S

# -- one run -----------------------------------------------------------------------------
def run(cfg: StepConfig, run_id: str, user_fn: Optional[Callable] = None,
        checked_for: Optional[str] = None) -> dict:
    """Run warm-up, measured and profiled steps. Never raises: a failure comes back as
    status='failed' with the traceback, after aborting the group so peers stop waiting.
    ``checked_for``: the device type the lab checked the run for (Lab.check); a run checked
    for this engine's device is trusted, any other (a direct call) is checked here."""
    from nbtools.engine import progress, signals
    t_start = time.time_ns()
    progress.publish("start", run_id=run_id)
    # the machine's signals through the whole run, compiles included (engine/signals.py)
    sampler = signals.begin(_S.device.type, _S.rank, run_id) if _S.device is not None else None
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
            out.update(_run(cfg, run_id, user_fn, checked_for))   # unpickles a user's code
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
        release_peers(run_id, out["error"])
    out["warnings"] = _warning_rows(caught)
    if sampler is not None:
        try:
            out["machine"], out["signals"] = sampler.finish()
        except Exception as e:  # noqa: BLE001 - the samples are a courtesy, the run is not
            out["machine"] = dict(error=f"sampling failed: {type(e).__name__}: {e}")
    out["engine_s"] = (time.time_ns() - t_start) / 1e9
    progress.publish("done", run_id=run_id)
    return out


def recorder():
    """The engine's compile recorder, made on its first run (process_group.setup leaves it
    to this, so a lab's start does not wait for torch._dynamo's import)."""
    if _S.recorder is None:
        from nbtools.engine.compile_recorder import CompileRecorder
        _S.recorder = CompileRecorder()
    return _S.recorder


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


def _run(cfg: StepConfig, run_id: str, user_fn, checked_for) -> dict:
    # Lab() returns before its engines' background import (torch._dynamo, this run's
    # modules) is done: finish it first, so none of it runs beside a timed step
    _S.finish_warm_import()
    # the lab's early import of this Workload's modules (engine/preload.py): finished
    # before the run imports anything itself, never beside it
    from nbtools.engine import preload
    preload_wait_s = preload.wait()
    import torch
    from nbtools.engine import capture
    from nbtools.analysis.compile_counts import outcome
    from nbtools.config.workload import Workload, check_run, from_payload
    user_fn, source_key = from_payload(user_fn)   # keyed on the bytes: no stale code
    if checked_for != _S.device.type:
        # No lab checked it for this device. Unchecked, CPU ranks would run fp16 autocast
        # or the cudagraphs backend (as eager) without a word: a different run than asked.
        check_run(user_fn, cfg, _S.device.type)
    if _S.device.type == "cpu" and cfg.backend == "inductor" and (
            cfg.compiled or (user_fn is not None and not isinstance(user_fn, Workload))):
        # inductor's machine check (its C++ ISA probes) once, outside the lab's cold cache
        # and outside this run's compile events: cpu_isa.py says why
        from nbtools.engine import cpu_isa
        cpu_isa.check_once()
    rec = recorder()
    rec.install()
    rec.start_run()
    notes, reused = prepare(cfg, user_fn, source_key)
    if not reused:
        from nbtools.engine import quiet
        quiet.new_state()
    wl, prep = _S.workload, _S.prepared
    dev = _S.device
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    check = None
    with PeerWatch(run_id) as watch:
        batches = {}

        def batch(i):
            if i not in batches:
                batches.clear()
                batches[i] = wl.make_batch(i)
            return batches[i]

        with matmul_precision(cfg.matmul_precision):
            if cfg.check:
                check = _check(prep, batch(0))
            _S.reports.clear()     # the same list object the custom step's ctx appends to
            own = user_fn is not None and not isinstance(user_fn, Workload)
            timings = capture.run_steps(cfg, prep.step, batch, dev, rec, _S.rank, own_step=own)
        if watch.peer_error:
            raise RuntimeError(f"stopped because a peer failed ({watch.peer_error})")
    result = dict(timings)
    items = _measured_items(wl, cfg)
    compile_wire = rec.finish_run(_S.rank)
    key = state_key(cfg, source_key)
    if int(compile_wire["counts"].get("graphs", 0)) > 0 or key not in _S.compiled_in:
        _S.compiled_in[key] = run_id
    result.update(
        compile=compile_wire, notes=list(notes), reused=reused, check=check,
        compile_outcome=outcome(compile_wire["counts"], cfg.compiled, reused),
        model_built_at=_S.model_built_at, built_by=_S.compiled_in[key],
        peak_mem_mb=(torch.cuda.max_memory_allocated() / 2**20) if cuda else float("nan"),
        rss_mb=_rss_mb(), items_per_step=sum(items["real"]) / max(1, len(items["real"])),
        step_items=items, flops_per_step=wl.flops_per_step,
        shapes=wl.shapes(0), unused=list(cfg.unused_on(dev.type)),
        env=_env(), host=socket.gethostname(), reports=list(_S.reports), train=bool(wl.train),
        batch_size=int(getattr(wl, "batch_size", 0) or 0) or None,
        own_step=bool(user_fn is not None and not isinstance(user_fn, Workload)),
        preload=dict(waited_s=preload_wait_s, imported=preload.take_new()))
    _S.run_count += 1
    return result


def _measured_items(wl, cfg) -> dict:
    """Per measured step: the real items (varying sequence lengths: the tokens processed,
    padding excluded) and the padded ones (what the inputs held). items_per_s is the real
    throughput; the client's tokens_per_s and padding_pct read these, so they need neither
    torch nor the scenarios' length schedule."""
    steps = list(range(cfg.warmup, cfg.warmup + cfg.steps))
    real = [float(wl.items_at(i)) if wl.items_at is not None else float(wl.items_per_step)
            for i in steps]
    padded = real if wl.padded_at is None else [float(wl.padded_at(i)) for i in steps]
    return dict(step=steps, real=real, padded=padded)


def _check(prep, batch) -> dict:
    """First step's result against eager on the same inputs and weights, twice: eager in the
    config's own precision (max_abs, max_rel: what compile changed) and eager in full fp32
    with no autocast (full_max_abs, full_max_rel: what compile and the precision changed
    together, the numerics a precision move is kept on). A loss also gives its three values."""
    import torch
    from nbtools.engine.precision import full_precision
    inputs, target = batch
    ref = prep.eager_forward(inputs, target)
    full = None
    # a step function of your own sets its own precision: it has no full-precision twin
    if "full" in inspect.signature(prep.eager_forward).parameters:
        with full_precision():
            full = prep.eager_forward(inputs, target, full=True)
    got = prep.step(inputs, target)
    # The step above was a real step (it updated the weights under training); it counts as
    # the first warm-up step, which is why check runs before warm-up.
    a, b = got.detach().float(), ref.detach().float()
    out = dict(finite=bool(torch.isfinite(a).all()),
               what="loss" if a.numel() == 1 else f"output{tuple(a.shape)}")
    refs = (("", b),) + ((("full_", full.detach().float()),) if full is not None else ())
    for key, r in refs:
        diff = (a - r).abs().max().item() if a.numel() else 0.0
        scale = r.abs().max().item() or 1.0
        out.update({f"{key}max_abs": diff, f"{key}max_rel": diff / scale})
        if a.numel() == 1:
            out.update({"value": a.item(), f"{key or 'ref_'}value": r.item()})
    return out


def _rss_mb() -> float:
    try:
        import psutil
        return psutil.Process().memory_info().rss / 2**20
    except Exception:
        return float("nan")


def _env() -> dict:
    import platform
    import torch
    # str: unpickling a TorchVersion would import torch in the client (seconds)
    env = dict(torch=str(torch.__version__), python=platform.python_version(),
               device=str(_S.device), world_size=_S.world)
    if _S.device.type == "cuda":
        props = torch.cuda.get_device_properties(0)
        # the card's own numbers that a kernel reading is held against (analysis/card.py)
        env.update(cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0),
                   gpu_mem_mb=props.total_memory / 2**20, gpu_sms=props.multi_processor_count,
                   gpu_cc=f"{props.major}.{props.minor}",
                   nccl=".".join(map(str, torch.cuda.nccl.version())))
    else:
        env.update(cpu=platform.processor() or platform.machine(), threads=torch.get_num_threads())
    return env
