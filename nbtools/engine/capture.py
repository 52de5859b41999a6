"""Engine side: run the warm-up, measured and profiled steps, time each one, and capture
the profiled ones with torch.profiler (parsed here, on the engine, into compact columns)."""
from __future__ import annotations

import contextlib
import math
import time

import torch

from nbtools.engine import progress, quiet, signals
from nbtools.engine.memory import MemoryRecorder
from nbtools.schema import tables
from nbtools.schema.progress import STEP_PHASE
from nbtools.engine.apply import range_ctx
from nbtools.config.step_config import CAPTURING_MODES, StepConfig

_graphs_initialised = False


def init_for_cuda_graphs() -> None:
    """The profiler must be told before the first capture, or graph-replayed kernels go
    missing from later profiles (pytorch #75504; gpt-fast does the same)."""
    global _graphs_initialised
    if not _graphs_initialised and torch.cuda.is_available():
        try:
            from torch.profiler._utils import _init_for_cuda_graphs
            _init_for_cuda_graphs()
        except Exception:  # private API: profiling still works, graphs may show fewer kernels
            pass
        _graphs_initialised = True


def run_steps(cfg: StepConfig, step, batch, device, recorder, rank: int,
              own_step: bool = True) -> dict:
    """Returns the steps table (wire form), the events table (wire form, profiled steps)
    and timing numbers. Step i's inputs are made before its clock starts. ``own_step``:
    the step is a user's function (it may capture CUDA graphs itself)."""
    cuda = device.type == "cuda"
    profiled = cfg.profiled if cfg.capture == "full" else 0
    # A profiler session leaves CUPTI attached (a cost on every later launch) unless it is
    # torn down (quiet.cupti_teardown). With teardown each profile attaches and detaches it
    # and nothing needs attaching early; without it (graph-capturing configs, old CUDA)
    # CUPTI is attached before anything may capture a graph: any compile or a user's own
    # step may.
    teardown = quiet.cupti_teardown(torch.version.cuda,
                                    cfg.cudagraph != "off" or cfg.compile in CAPTURING_MODES)
    if cuda and not teardown and (profiled or cfg.compiled or cfg.cudagraph != "off"
                                  or own_step):
        init_for_cuda_graphs()
    rows = dict(rank=[], step=[], phase=[], ts_ns=[], dur_ns=[])
    plan = [("warmup", cfg.warmup), ("measured", cfg.steps)]
    plan.append(("profiled", profiled))
    windows = []
    sampler = signals.current()      # sampling since the run began (runner.run)
    mem = MemoryRecorder(cfg, device, rank)
    mem.start()
    with contextlib.ExitStack() as timed:   # quiet.timed_steps: the measured and profiled steps
        prof, last, lost = _phases(plan, cfg, step, batch, cuda, recorder, rank, rows, windows,
                                   timed, sampler, mem)
    value = _scalar(last)
    # only the last step's result is looked at: it is already synced for last_value, and a
    # NaN loss stays NaN (it reaches the weights); a per-step check would sync every step
    out = dict(steps=tables.to_wire(tables.STEP_COLUMNS, rows), last_value=value,
               nonfinite=isinstance(last, torch.Tensor) and not math.isfinite(value),
               **mem.collect(prof))
    if lost:
        out["profile_lost"] = lost
    if prof is not None:
        from nbtools.trace.load import events_from_profiler
        from nbtools.trace.details import detail_rows, details_wire
        progress.publish("parse")
        t = time.perf_counter()
        # tooltips: shapes, groups (and the stack's frames), from the same pass
        details = detail_rows(stack=cfg.stack, code=step)
        out["events"] = events_from_profiler(prof, rank, windows, details=details)
        out["event_details"] = details_wire(details)
        out["parse_s"] = time.perf_counter() - t
    return out


def _phases(plan, cfg, step, batch, cuda, recorder, rank, rows, windows, timed, sampler, mem):
    """Run the plan's phases. Returns the profiler (None when none ran or it failed as it
    stopped), the last step's result, and why the profiler failed ("" when it did not)."""
    i, prof, last, quieted, lost = 0, None, None, False, ""
    for phase, n in plan:
        if n == 0:
            continue
        if phase != "warmup" and not quieted:
            timed.enter_context(quiet.timed_steps(recorder, cfg.warmup > 0, sampler))
            quieted = True
        if phase == "profiled":
            acts = [torch.profiler.ProfilerActivity.CPU]
            if cuda:
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            prof = torch.profiler.profile(activities=acts, record_shapes=True,
                                          with_stack=cfg.stack, **mem.profiler_kwargs())
            prof.__enter__()
        try:
            for k in range(n):
                if k == 0 or quiet.publish_step(phase):
                    progress.publish(STEP_PHASE[phase], k + 1, n)
                inputs, target = batch(i)
                recorder.set_step(i)
                t0 = time.time_ns()
                if cuda:
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    p0 = 0
                else:
                    p0 = time.perf_counter_ns()
                with _step_range(cfg, i, phase):
                    last = step(inputs, target)
                if cuda:
                    e1.record()
                    e1.synchronize()
                    dur = int(e0.elapsed_time(e1) * 1e6)
                else:
                    dur = time.perf_counter_ns() - p0
                t1 = time.time_ns()
                rows["rank"].append(rank)
                rows["step"].append(i)
                rows["phase"].append(phase)
                rows["ts_ns"].append(t0)
                rows["dur_ns"].append(dur)
                if phase == "profiled":
                    windows.append((i, t0, t1))
                i += 1
        finally:
            if prof is not None and phase == "profiled":
                try:
                    prof.__exit__(None, None, None)
                except Exception as e:  # noqa: BLE001 - Kineto's own failure, not the step's
                    # the steps ran and were timed: keep them (a flag says what is missing)
                    lost = f"{type(e).__name__}: {e}"[:300]
                    prof = None
        recorder.set_step(-1)
    return prof, last, lost


def _step_range(cfg: StepConfig, i: int, phase: str):
    if cfg.capture == "off":
        import contextlib
        return contextlib.nullcontext()
    return range_ctx(f"nbtools/step {i}")


def _scalar(v) -> float:
    try:
        if isinstance(v, torch.Tensor) and v.numel() == 1:
            return float(v.float().item())
        if isinstance(v, torch.Tensor):
            return float(v.float().abs().mean().item())
    except Exception:
        pass
    return float("nan")
