"""Kineto events -> one columnar events table (tables.EVENT_COLUMNS), from two sources.

Two sources, one classifier: ``events_from_profiler`` reads a live torch.profiler session on
the engine (absolute ns from ``kineto_results.events()``, no JSON written) and
``read_traces`` reads the Kineto JSON any PyTorch job writes (read_json/). Both reduce
their input to the same raw columns (Kineto category, name, pid, tid, ts, dur, correlation)
and hand them to ``kineto_events.build``, the only place that decides category, lane, step
and graph (its docstring documents those decisions). The tables derived from the events
(steps, the summary) are the analysis's: results/load.py computes them.
"""
from __future__ import annotations

import operator
import re
from pathlib import Path

import numpy as np

from nbtools.schema import tables
from nbtools.trace.details import add_detail
from nbtools.trace.files import trace_files
from nbtools.trace.kineto import GPU_KINDS, RAW, build
from nbtools.trace.kineto import classify  # noqa: F401  (re-exported: tests import it from here)
from nbtools.trace.read_json import MAX_GB, RankUnknown, TraceError, short_repr, read_trace  # TraceError: users catch it here

__all__ = ["TraceError", "classify", "events_from_profiler", "read_traces"]

_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)", re.I)


def _table_list(table: dict, problems: dict | None = None) -> list:
    out = [str(k) for k in table]
    for i, s in enumerate(out):   # one check per distinct name, not per event
        if not s.isascii():
            try:
                s.encode("utf-8")
            except UnicodeEncodeError:   # a lone surrogate ("\ud800") is valid JSON, not text
                out[i] = s.encode("utf-8", "replace").decode("utf-8")
                if problems is not None:
                    problems.setdefault("name is not valid Unicode",
                                        [0, repr(s[:20]), "shown with '?'"])[0] += 1
    return out


# ---------------------------------------------------------------------------------------
# live profiler (engine side)

def events_from_profiler(prof, rank: int, step_windows=None, details: dict | None = None) -> dict:
    """A finished ``torch.profiler.profile`` -> EVENT_COLUMNS wire form, without writing
    JSON. ``step_windows``: [(step, start_ns, end_ns)] on the host clock (time.time_ns());
    without it, steps come from ``nbtools/step N`` / ``ProfilerStep#N`` ranges."""
    kinds, names = {}, {}
    rows = []
    # one pass over the profile (each events() call builds every event's wrapper anew): the
    # tooltips' details (``details``: trace.details.detail_rows()) come from the same walk
    for e in prof.profiler.kineto_results.events():
        if details is not None:
            add_detail(details, rank, e)
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

def read_traces(path, rank=None, max_gb: float = MAX_GB, details: bool = False) -> dict:
    """Kineto trace files -> the fields of a Run but the tables derived from the events
    (``nbtools.load_traces`` says how files, ranks, times and damage are read; it adds the
    steps and the summary). Beside the Run's fields: ``job_flags``, what the job as a whole
    lacks and the tooltips that could not be read, said after the flags of the derived
    tables; ``damaged_cat``, per rank, the events whose cat was not text."""

    files, skipped = trace_files(path)
    if rank is not None and len(files) != 1:
        raise TraceError(f"rank={rank!r} names the rank of one file, but {len(files)} were "
                         "given; load them one by one or name them rank-<N>.json.gz")
    if not (isinstance(max_gb, (int, float)) and not isinstance(max_gb, bool) and max_gb > 0):
        raise TraceError(f"max_gb={max_gb!r}: give a positive number of GB")
    owner, frames, info, damaged_cat, empty = {}, [], {}, {}, {}
    flags = [f"{q.name}: {why}" for q, why in skipped]
    for f in files:
        meta, cols = read_trace(f, max_gb)
        r = _rank_of(f, meta, rank, flags)
        if r in owner:
            raise TraceError(f"{owner[r]} and {f} both hold rank {r}: load traces of one job "
                             "at a time, or pass the files separately")
        owner[r] = f
        raw = cols.columns()
        _absolute_times(f, r, meta, raw, cols.problems, flags)
        kinds, names = (_table_list(cols.kinds.texts(), cols.problems),
                        _table_list(cols.names.texts(), cols.problems))
        flags += [f"rank {r}: {f.name}: {what} in {n} event(s), e.g. {example}: {fate}"
                  for what, (n, example, fate) in cols.problems.items()]
        damaged_cat[r] = sum(v[0] for k, v in cols.problems.items() if k.startswith("cat "))
        wire = build(r, raw, kinds, names)
        frames.append(tables.from_wire(tables.EVENT_COLUMNS, wire))
        info[r] = _info(f, meta, len(frames[-1]), flags)
        if not len(frames[-1]):
            empty[r] = f"{f.name}: no events to show: " + (
                "its traceEvents is empty" if not cols.entries else
                f"none of its {cols.entries} entries is a timed span (ph 'X') with a time")
            flags.append(f"rank {r}: {empty[r]}")
    # one non-empty file: its frame is what concat would build (0.4 ms of a fixed cost)
    events = frames[0] if len(frames) == 1 and len(frames[0]) else \
        tables.concat(frames, tables.EVENT_COLUMNS)
    job_flags = []
    world = max([i.get("world_size") or 0 for i in info.values()] + [len(info)])
    missing = sorted(set(range(world)) - set(info)) if world > len(info) else []
    if missing:   # one rank shown where the job had more: said, never a silent subset
        job_flags.append(f"distributedInfo says world_size {world} but {len(info)} rank(s) "
                     f"were read: rank(s) {_ranks_text(missing)} have no trace here")
    backends = sorted({str(i["backend"]) for i in info.values() if i.get("backend")})
    env = {"source": "traces", "world_size": int(world), "backend": ",".join(backends),
           "devices": sorted({d for i in info.values() for d in i.get("devices", [])}),
           "files": [f.name for f in files]}
    out = dict(config=None, events=events, env=env, ranks=info, flags=flags,
               job_flags=job_flags, damaged_cat=damaged_cat, source="traces")
    if not len(events):   # nothing to show is a failure with its reason, not a blank row
        out.update(status="failed", errors=empty)
    if details:
        out["event_details"] = _file_details(owner, job_flags)
    return out


def _file_details(owner: dict, flags: list):
    """The tooltips' details from each file's args, a second pass over files the reader has
    already accepted (so within ``max_gb``). A file whose args cannot be read loses its
    tooltips, said in the flags, never the run."""
    from nbtools.trace.details import DETAIL_COLUMNS, trace_file_details
    frames = []
    for r, f in sorted(owner.items()):
        try:
            frames.append(tables.from_wire(DETAIL_COLUMNS, trace_file_details(f, r)))
        except Exception as e:    # gzip, zlib, JSON, memory: tooltips are extra, the run is not
            flags.append(f"rank {r}: {f.name}: tooltip details not read "
                         f"({type(e).__name__}: {str(e)[:120]})")
    return tables.concat(frames, DETAIL_COLUMNS)


def _absolute_times(f: Path, r: int, meta: dict, raw: dict, problems: dict, flags: list):
    """ts (µs since baseTimeNanoseconds) -> epoch ns in place. A base that is not a whole
    number of ns, or one that pushes times past int64, is damage: flagged, never wrapped."""
    base = meta.get("baseTimeNanoseconds")
    ts = raw["ts"]
    if base is None:
        if len(ts) and ts.min() < 10**17:
            flags.append(f"rank {r}: {f.name} has no baseTimeNanoseconds and its times are "
                         "not epoch-based; it will not line up with other ranks")
        return
    over = ts > np.iinfo(np.int64).max - base if isinstance(base, int) and 0 <= base < 2**63 \
        else None
    if over is None or isinstance(base, bool) or over.sum() * 2 > len(over):
        # most events past the year 2262: the base is what is damaged, not the events
        flags.append(f"rank {r}: {f.name}: baseTimeNanoseconds={short_repr(base)} is not an "
                     "epoch time in ns (not a whole number, or it pushes the times past "
                     "int64); it is ignored, so this rank's times are relative and will not "
                     "line up with other ranks")
        return
    if over.any():   # time past the year 2262 once the base is added: damage, not a time
        problems[f"ts is past int64 ns once baseTimeNanoseconds={base} is added"] = \
            [int(over.sum()), f"{int(ts[over][0] // 1000)} µs", "dropped"]
        for key in RAW:
            raw[key] = raw[key][~over]
    raw["ts"] += base


def _whole(v, low: int, high: int):
    """A JSON rank/world size -> int in [low, high], or None. Digit strings ("3") and numpy
    integers count; 1.7, -1, True and 2**70 do not."""
    if isinstance(v, str):
        v = v.strip()
        v = int(v) if v.isdecimal() and len(v) < 12 else None
    elif isinstance(v, bool) or not hasattr(v, "__index__"):
        v = None
    else:
        v = operator.index(v)
    return v if v is not None and low <= v <= high else None


_MAX_RANK = 2**31 - 1   # ranks are int32 in the events table


def _ranks_text(ranks: list) -> str:
    return ", ".join(map(str, ranks)) if len(ranks) <= 8 else \
        f"{', '.join(map(str, ranks[:6]))}, ... {ranks[-1]} ({len(ranks)} in all)"


def _rank_of(f: Path, meta: dict, rank, flags: list) -> int:
    named = _RANK_IN_NAME.search(f.name)
    if rank is not None:
        r = _whole(rank, 0, _MAX_RANK)
        if r is None:
            raise TraceError(f"rank={short_repr(rank)}: give a whole number from 0 to {_MAX_RANK}")
        return r
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and info.get("rank") is not None:
        r = _whole(info["rank"], 0, _MAX_RANK)
        if r is None:
            raise TraceError(f"{f}: distributedInfo.rank is {short_repr(info['rank'])}, not a whole "
                             f"number from 0 to {_MAX_RANK}; pass load_traces(file, rank=N)")
        if named and _whole(named.group(1), 0, _MAX_RANK) != r:
            flags.append(f"{f.name}: file name says rank {named.group(1)}, distributedInfo "
                         f"says {r}; using {r}")
        return r
    if named:
        r = _whole(named.group(1), 0, _MAX_RANK)
        if r is None:
            raise TraceError(f"{f}: the file name says rank {named.group(1)[:20]}, beyond "
                             f"{_MAX_RANK}; pass load_traces(file, rank=N)")
        return r
    raise RankUnknown(f"{f}: cannot tell its rank: the trace has no distributedInfo.rank and "
                     "the file name does not say rank<N>. Pass load_traces(file, rank=N), or "
                     "rename it like 'rank-0.json.gz'.")


def _info(f: Path, meta: dict, n: int, flags: list) -> dict:
    """Whitelisted metadata only (see load_traces)."""
    di = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else {}
    out = {"file": f.name, "events": n}
    if di.get("world_size") is not None:
        world = _whole(di["world_size"], 1, _MAX_RANK + 1)
        if world is None:
            flags.append(f"{f.name}: distributedInfo.world_size={short_repr(di['world_size'])} is "
                         "not a whole number >= 1; ignored (the world size is the ranks loaded)")
        else:
            out["world_size"] = world
    for key in ("backend", "nccl_version"):
        if isinstance(di.get(key), (int, str)) and not isinstance(di.get(key), bool):
            out[key] = di[key]
    for key in ("schemaVersion", "cupti_version", "cuda_runtime_version",
                "cuda_driver_version", "baseTimeNanoseconds"):
        if isinstance(meta.get(key), (int, str)) and not isinstance(meta.get(key), bool):
            out[key] = meta[key]
    devices = meta.get("deviceProperties")
    if isinstance(devices, list):
        out["devices"] = [short_repr(d.get("name")) if not isinstance(d.get("name"), str)
                          else d["name"] for d in devices if isinstance(d, dict)]
    return out

