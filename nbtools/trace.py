"""Kineto events -> one columnar events table (tables.EVENT_COLUMNS), from two sources.

Two sources, one classifier: ``events_from_profiler`` reads a live torch.profiler session on
the engine (absolute ns from ``kineto_results.events()``, no JSON written) and
``load_traces`` reads the Kineto JSON any PyTorch job writes (trace_json.py). Both reduce
their input to the same raw columns (Kineto category, name, pid, tid, ts, dur, correlation)
and hand them to ``kineto_events.build``, the only place that decides category, lane, step
and graph (its docstring documents those decisions).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from . import tables
from .kineto_events import GPU_KINDS, RAW, build
from .kineto_events import classify  # noqa: F401  (re-exported: tests import it from here)
from .trace_json import TraceError, read_trace  # TraceError: users catch it from here

__all__ = ["TraceError", "classify", "events_from_profiler", "load_traces"]

_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)", re.I)


def _table_list(table: dict) -> list:
    return [str(k) for k in table]


# ---------------------------------------------------------------------------------------
# live profiler (engine side)

def events_from_profiler(prof, rank: int, step_windows=None) -> dict:
    """A finished ``torch.profiler.profile`` -> EVENT_COLUMNS wire form, without writing
    JSON. ``step_windows``: [(step, start_ns, end_ns)] on the host clock (time.time_ns());
    without it, steps come from ``nbtools/step N`` / ``ProfilerStep#N`` ranges."""
    kinds, names = {}, {}
    rows = []
    for e in prof.profiler.kineto_results.events():
        kind = _kind_of(e)
        gpu = kind in GPU_KINDS
        rows.append((kinds.setdefault(kind, len(kinds)), names.setdefault(e.name(), len(names)),
                     e.device_index() if gpu else 0, e.device_resource_id(),
                     e.start_ns(), e.duration_ns(), e.correlation_id()))
    cols = np.array(rows, np.int64).reshape(-1, 7).T
    return build(rank, dict(zip(RAW, cols)), _table_list(kinds), _table_list(names),
                 step_windows)


def _kind_of(e) -> str:
    kind = getattr(e, "activity_type", None)
    if kind is not None:
        return kind()
    # Older builds without activity_type(): rebuild Kineto's category from what we have.
    name = e.name()
    if str(e.device_type()).endswith("CPU"):
        if e.is_user_annotation():
            return "user_annotation"
        return "cuda_runtime" if name.startswith(("cuda", "hip", "cu")) else "cpu_op"
    if e.is_user_annotation():   # record_function's GPU-side copy: spans kernels, not work
        return "gpu_user_annotation"
    if name.startswith("Memcpy"):
        return "gpu_memcpy"
    if name.startswith("Memset"):
        return "gpu_memset"
    return "kernel"


# ---------------------------------------------------------------------------------------
# Kineto JSON files (read by trace_json.py)

def load_traces(path, rank=None):
    """Kineto traces written by any PyTorch job -> a Run (source="traces").

    ``path``: a ``.json``/``.json.gz`` file, a folder of them, or a list of files/folders.
    The rank of a file is ``rank`` (single file only), else its ``distributedInfo.rank``,
    else a file name that says ``rank<N>``/``rank-N``/``rank_N``. Times are absolute epoch
    ns: ``ts`` (µs) plus ``baseTimeNanoseconds`` when the trace has it, else ``ts`` is epoch
    µs already (older traces); ``displayTimeUnit`` is a display hint and is ignored.
    Only whitelisted metadata (versions, devices, world size) reaches ``Run.env``: user
    names, host names and paths in traces stay behind."""
    from . import analysis
    from .run import Run

    files = _trace_files(path)
    if rank is not None and len(files) != 1:
        raise TraceError(f"rank={rank} names the rank of one file, but {len(files)} were given; "
                         "load them one by one or name them rank-<N>.json.gz")
    owner, frames, info, flags = {}, [], {}, []
    for f in files:
        meta, cols = read_trace(f)
        r = _rank_of(f, meta, rank, flags)
        if r in owner:
            raise TraceError(f"{owner[r]} and {f} both hold rank {r}: load traces of one job "
                             "at a time, or pass the files separately")
        owner[r] = f
        raw = cols.columns()
        base = meta.get("baseTimeNanoseconds")
        if isinstance(base, int):
            raw["ts"] += base
        elif len(raw["ts"]) and raw["ts"].min() < 10**17:
            flags.append(f"rank {r}: {f.name} has no baseTimeNanoseconds and its times are not "
                         "epoch-based; it will not line up with other ranks")
        wire = build(r, raw, _table_list(cols.kinds), _table_list(cols.names))
        frames.append(tables.from_wire(tables.EVENT_COLUMNS, wire))
        info[r] = _info(f, meta, len(frames[-1]))
    events = tables.concat(frames, tables.EVENT_COLUMNS)
    summary = analysis.per_rank(events)
    for r in summary.loc[summary["device"] == "cpu", "rank"]:
        flags.append(f"rank {r}: no GPU events (CPU-only trace): CPU-op busy is reported")
    world = max([i.get("world_size") or 0 for i in info.values()] + [len(info)])
    backends = sorted({str(i["backend"]) for i in info.values() if i.get("backend")})
    env = {"source": "traces", "world_size": int(world), "backend": ",".join(backends),
           "devices": sorted({d for i in info.values() for d in i.get("devices", [])}),
           "files": [f.name for f in files]}
    return Run(config=None, events=events, steps=_steps_table(events), summary=summary,
               env=env, ranks=info, flags=flags, source="traces")


def _trace_files(path) -> list:
    items = list(path) if isinstance(path, (list, tuple)) else [path]
    files = []
    for item in items:
        p = Path(item).expanduser()
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.is_file()
                           and q.name.endswith((".json", ".json.gz")))
            if not found:
                raise TraceError(f"{p}: no .json or .json.gz trace files in this folder")
            files += found
        elif p.is_file():
            files.append(p)
        else:
            raise TraceError(f"{p}: no such file or folder")
    if not files:
        raise TraceError("no trace files given")
    return files


def _rank_of(f: Path, meta: dict, rank, flags: list) -> int:
    named = _RANK_IN_NAME.search(f.name)
    if rank is not None:
        return int(rank)
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and info.get("rank") is not None:
        try:
            r = int(info["rank"])
        except (TypeError, ValueError):
            raise TraceError(f"{f}: distributedInfo.rank is {info['rank']!r}, not a number; "
                             "pass rank=N") from None
        if named and int(named.group(1)) != r:
            flags.append(f"{f.name}: file name says rank {named.group(1)}, distributedInfo "
                         f"says {r}; using {r}")
        return r
    if named:
        return int(named.group(1))
    raise TraceError(f"{f}: cannot tell its rank: the trace has no distributedInfo.rank and "
                     "the file name does not say rank<N>. Pass load_traces(file, rank=N), or "
                     "rename it like 'rank-0.json.gz'.")


def _info(f: Path, meta: dict, n: int) -> dict:
    """Whitelisted metadata only (see load_traces)."""
    di = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else {}
    out = {"file": f.name, "events": n}
    for key in ("world_size", "backend", "nccl_version"):
        if isinstance(di.get(key), (int, str)):
            out[key] = di[key]
    for key in ("schemaVersion", "cupti_version", "cuda_runtime_version",
                "cuda_driver_version", "baseTimeNanoseconds"):
        if isinstance(meta.get(key), (int, str)):
            out[key] = meta[key]
    devices = meta.get("deviceProperties")
    if isinstance(devices, list):
        out["devices"] = [str(d.get("name")) for d in devices if isinstance(d, dict)]
    return out


def _steps_table(events: pd.DataFrame) -> pd.DataFrame:
    """STEP_COLUMNS rows (phase "profiled") from the step ranges the trace carries."""
    from .analysis import step_times
    st = step_times(events, spans=False)
    return tables.from_columns({"rank": st["rank"], "step": st["step"], "ts_ns": st["ts_ns"],
                                "phase": ["profiled"] * len(st), "dur_ns": st["dur_ns"]},
                               tables.STEP_COLUMNS)
