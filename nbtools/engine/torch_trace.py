"""TORCH_TRACE on a rank: PyTorch's structured compile log goes to a fresh folder while a
run executes and comes back as {name: bytes} with the rank's result (the client keeps it in
the run's history folder: nbtools/results/torch_trace.py)."""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path


def start(rank: int, run_id: str) -> str:
    """Send this process's structured trace to a fresh temporary folder; returns it."""
    base = tempfile.mkdtemp(prefix=f"nbtools-torch-trace-{run_id}-")
    torch_trace_dir(rank, base)
    return base


def stop(rank: int, base: str) -> dict:
    """Turn the trace off and return its files ({name: bytes}); the folder goes."""
    torch_trace_dir(rank, None)      # closes the log, so everything written is on disk
    out = {}
    for p in sorted(Path(base).rglob("*")):
        if p.is_file():
            out[p.name] = p.read_bytes()
    shutil.rmtree(base, ignore_errors=True)
    return out


def torch_trace_dir(rank: int, base: str | None) -> str:
    """Send this process's structured compile trace (tlparse input) to base/rank_<rank>;
    base=None turns it off again. Returns the folder ("" when off).

    TORCH_TRACE is read once, when torch is imported, into a lazily opened handler; setting
    the variable later does nothing. So we swap that handler for one pointing at our folder
    (and set TORCH_TRACE for child processes and later _init_logs calls). Must run before
    the compiles of interest. Verified on torch 2.13 (torch._logging._internal:
    LOG_TRACE_HANDLER, LazyTraceHandler, trace_log; trace_structured writes only while
    trace_log has a handler)."""
    from torch._logging import _internal as li
    old = getattr(li, "LOG_TRACE_HANDLER", None)
    if old is not None:
        li.trace_log.removeHandler(old)
        old.close()
    li.LOG_TRACE_HANDLER = None
    if base is None:
        os.environ.pop("TORCH_TRACE", None)
        return ""
    path = os.path.abspath(os.path.join(base, f"rank_{rank}"))
    os.makedirs(path, exist_ok=True)
    os.environ["TORCH_TRACE"] = path
    handler = li._track_handler(li.LazyTraceHandler(path))
    handler.setFormatter(li.TorchLogsFormatter(trace=True))
    li.LOG_TRACE_HANDLER = handler
    li.trace_log.setLevel(logging.DEBUG)
    li.trace_log.addHandler(handler)
    return path
