"""A Run's events out again: one Perfetto/Chrome trace for the whole run, or per-rank Kineto
traces that HolisticTraceAnalysis (and nbtools.load_traces) can open.

Times: every file uses one base time for all ranks (the run's first event, floored to the
second) and writes ``ts``/``dur`` in µs relative to it, so float64 keeps every ns.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd

from nbtools.analysis.collective_flows import collective_flows
from nbtools.analysis.step_metrics import step_times
from nbtools.schema.tables import lane_label
from nbtools.common.atomic import write_file
from nbtools.common.outputs import KINETO_MARK, MARK, output_refusal
from nbtools.trace.details import attach, collective_detail

try:
    import orjson

    def _dumps(doc) -> bytes:
        return orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
except ImportError:  # pragma: no cover
    def _dumps(doc) -> bytes:
        return json.dumps(doc, default=lambda o: o.item()).encode()

# our category -> Kineto's, for events on GPU lanes and on CPU lanes
_KINETO_GPU = {"compute": "kernel", "communication": "kernel", "memcpy": "gpu_memcpy",
               "memset": "gpu_memset", "sync": "cuda_sync", "annotation": "gpu_user_annotation"}
_KINETO_CPU = {"runtime": "cuda_runtime", "sync": "cuda_runtime", "annotation": "user_annotation",
               "communication": "cpu_op", "cpu_op": "cpu_op"}


def _parts(run):
    """(events, compile_events, steps, world_size) of a Run or of a bare events table."""
    if isinstance(run, pd.DataFrame):
        return run, None, None, int(run["rank"].nunique())
    return run.events, run.compile_events, run.steps, run.world_size


def detail_args(ev: pd.DataFrame, details) -> list:
    """Each event's tooltip detail (shapes, bytes, stack, a collective's group) as slice
    args, keyed as the notebook writes them ("inputs", "bytes in", "stack", "group", ...);
    a collective's says what its trace did not record, as the tooltip does."""
    text = attach(ev.assign(count=1), details)
    comm = (ev["category"].astype(str) == "communication").to_numpy()
    out, said = [], {}
    for t, c in zip(text.tolist(), comm.tolist()):
        t = collective_detail(t) if c else t
        if (t, c) not in said:
            args = {}
            for part in t.split(" · ") if t else []:
                key, sep, value = part.partition(": ")
                if sep:
                    args[key] = value
                elif part.endswith(" moved in"):
                    args["bytes moved in"] = part[:-len(" moved in")]
                elif part.endswith(" in"):
                    args["bytes in"] = part[:-len(" in")]
            said[(t, c)] = args
        out.append(said[(t, c)])
    return out


def _base_ns(*frames) -> int:
    starts = [int(f["ts_ns"].min()) for f in frames if f is not None and len(f)]
    return (min(starts) // 10**9) * 10**9 if starts else 0


def _lanes(lanes: pd.Series):
    """lane string -> (is_gpu, pid-ish, tid) for each unique lane."""
    out = {}
    for lane in pd.unique(lanes.astype(str)):
        parts = lane.split(":")
        try:
            if parts[0] == "cuda":
                out[lane] = (True, int(parts[1]), int(parts[2]))
            else:
                out[lane] = (False, 0, int(parts[-1]))
        except (IndexError, ValueError):   # a lane we did not make: give it a number
            out[lane] = (lane.startswith("cuda"), 0, 10**6 + len(out))
    return out


def _us(ns: np.ndarray) -> list:
    return (ns / 1e3).tolist()


def kineto_trace(events: pd.DataFrame, rank: int, world_size: int, base_ns: int) -> dict:
    """The Kineto JSON document of one rank (``events`` may hold other ranks: filtered)."""
    ev = events[events["rank"] == rank]
    lanes = _lanes(ev["lane"])
    lane, cat, name = ev["lane"].astype(str), ev["category"].astype(str), ev["name"].astype(str)
    corr = ev["correlation"].to_numpy(np.int64)
    out = []
    for ln, c, n, ts, dur, k in zip(lane, cat, name, _us(ev["ts_ns"].to_numpy() - base_ns),
                                    _us(ev["dur_ns"].to_numpy()), corr.tolist()):
        gpu, dev, tid = lanes[ln]
        e = {"ph": "X", "cat": (_KINETO_GPU if gpu else _KINETO_CPU).get(c, "cpu_op"),
             "name": n, "pid": dev if gpu else 1000 + rank, "tid": tid, "ts": ts, "dur": dur}
        if gpu and c != "annotation":   # Kineto gives GPU ranges no stream: HTA relies on it
            e["args"] = {"device": dev, "stream": tid, "correlation": k}
        elif k >= 0:
            e["args"] = {"correlation": k}
        out.append(e)
    out += _profiler_steps(ev, rank, base_ns)
    # the mark first: a later write_kineto may replace this file, `view` still reads it
    return {KINETO_MARK: "write_kineto", "schemaVersion": 1,
            "distributedInfo": {"rank": int(rank), "world_size": world_size},
            "baseTimeNanoseconds": int(base_ns), "traceName": f"rank-{rank}.pt.trace.json",
            "traceEvents": out}


def _kineto_bytes(doc: dict) -> bytes:
    """Kineto's own layout: metadata first, '"key": value' with a space (HTA finds a file's
    rank with a regex that needs it), then the events."""
    head = ", ".join(f"{json.dumps(k)}: {json.dumps(v, separators=(', ', ': '))}"
                     for k, v in doc.items() if k != "traceEvents")
    return b"{" + head.encode() + b', "traceEvents": ' + _dumps(doc["traceEvents"]) + b"}"


def _profiler_steps(ev: pd.DataFrame, rank: int, base_ns: int) -> list:
    """HTA finds iterations only through ProfilerStep#N ranges. Traces that carry our
    ``nbtools/step N`` instead get copies under a category load_traces drops, so a round
    trip still gives the same events."""
    st = step_times(ev, spans=False)
    names = ev["name"].astype(str)
    if not len(st) or names.str.startswith("ProfilerStep").any():
        return []
    tid = min(t for gpu, _, t in _lanes(ev["lane"]).values() if not gpu)
    return [{"ph": "X", "cat": "nbtools_step", "name": f"ProfilerStep#{s}", "pid": 1000 + rank,
             "tid": tid, "ts": t, "dur": d}
            for s, t, d in zip(st["step"].tolist(), _us(st["ts_ns"].to_numpy() - base_ns),
                               _us(st["dur_ns"].to_numpy()))]


def write_kineto(run, folder, compress: bool = True, force: bool = False) -> list:
    """One ``rank-<r>.pt.trace.json[.gz]`` per rank in ``folder``; returns the paths. Each
    file is written whole or not at all and carries nbtools' mark; a file of that name
    nbtools did not write (a rank's own trace) is refused before any is written
    (FileExistsError naming it) unless ``force``."""
    events, _, _, world = _parts(run)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ranks = sorted(events["rank"].unique().tolist())
    paths = [folder / f"rank-{r}.pt.trace.json{'.gz' if compress else ''}" for r in ranks]
    for path in paths:
        why = output_refusal(path, "force=True", force=force)
        if why:
            raise FileExistsError(why)
    base = _base_ns(events)
    for r, path in zip(ranks, paths):
        data = _kineto_bytes(kineto_trace(events, r, world, base))
        write_file(path, gzip.compress(data, 6) if compress else data)
    return paths


def to_perfetto(run) -> dict:
    """One Chrome/Perfetto trace: a process per rank, a thread per lane (CPU lanes first,
    named as the notebook's rows: "r0 CPU thread 30692"; each slice's args carry the
    tooltip's shapes, bytes, stack and collective group, ``detail_args``),
    per rank a "steps" and a "compile" track for the steps and compile events (those with
    no time of their own are left out: they would sit at a made-up place), and a flow
    ("s"/"f" pair) from each rank's collective to the same collective on the rank that
    arrived last, so Perfetto draws who waited for whom."""
    events, compile_events, steps, _ = _parts(run)
    details = getattr(run, "event_details", None)
    if compile_events is not None and len(compile_events):
        compile_events = compile_events[(compile_events["ts_ns"] > 0)
                                        & (compile_events["reason"].astype(str)
                                           != "(counted only)")]
    base = _base_ns(events, compile_events, steps)
    out, tids = [], {}
    ranks = sorted(set(events["rank"].unique().tolist())
                   | set(steps["rank"].unique().tolist() if steps is not None else []))
    for r in ranks:
        ev = events[events["rank"] == r]
        lanes = sorted(pd.unique(ev["lane"].astype(str)), key=lambda s: (s.startswith("cuda"), s))
        tid = tids[r] = {ln: i + 1 for i, ln in enumerate(lanes)}
        out.append({"ph": "M", "name": "process_name", "pid": r, "args": {"name": f"rank {r}"}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": r, "args": {"sort_index": r}})
        for ln, t in [(lane_label(r, ln), t) for ln, t in tid.items()] \
                + [("steps", 0), ("compile", len(tid) + 1)]:   # named as the notebook's rows
            out.append({"ph": "M", "name": "thread_name", "pid": r, "tid": t, "args": {"name": ln}})
            out.append({"ph": "M", "name": "thread_sort_index", "pid": r, "tid": t,
                        "args": {"sort_index": t}})
        for ln, c, n, ts, dur, st, k, g, more in zip(
                ev["lane"].astype(str), ev["category"].astype(str), ev["name"].astype(str),
                _us(ev["ts_ns"].to_numpy() - base), _us(ev["dur_ns"].to_numpy()),
                ev["step"].tolist(), ev["correlation"].tolist(), ev["graph"].tolist(),
                detail_args(ev, details)):
            args = {"step": st, **more}
            if k >= 0:
                args["correlation"] = k
            if g:
                args["graph"] = True
            out.append({"ph": "X", "cat": c, "name": n, "pid": r, "tid": tid[ln], "ts": ts,
                        "dur": dur, "args": args})
        out += _track(steps, r, 0, base, lambda row: f"step {row.step} ({row.phase})")
        out += _track(compile_events, r, len(tid) + 1, base,
                      lambda row: f"{row.kind}: {row.name}" if row.name else row.kind)
    out += _flows(events, tids, base)
    # otherData first: its mark is in the file's first bytes, where `view DIR` looks to
    # skip this file as its own output rather than read it as a rank's trace
    return {"otherData": {MARK: "to_perfetto", "nbtools_base_time_ns": base},
            "traceEvents": out, "displayTimeUnit": "ns"}


def _flows(events, tids: dict, base: int) -> list:
    """Flow v1 events: "s" inside the waiting rank's collective slice, "f" (bp "e": bound to
    the enclosing slice) inside the last rank's; the args say how long the rank waited."""
    out = []
    for i, f in enumerate(collective_flows(events).itertuples(index=False)):
        common = {"cat": "collective", "name": f"{f.name} (step {f.step}, #{f.k + 1})",
                  "id": i + 1}
        out.append({**common, "ph": "s", "pid": f.rank, "tid": tids[f.rank][f.lane],
                    "ts": (f.ts_ns - base) / 1e3,
                    "args": {"waited_ns": int(f.wait_ns), "for_rank": int(f.last_rank)}})
        out.append({**common, "ph": "f", "bp": "e", "pid": f.last_rank,
                    "tid": tids[f.last_rank][f.last_lane], "ts": (f.last_ts_ns - base) / 1e3})
    return out


def _track(table, rank: int, tid: int, base: int, label) -> list:
    if table is None or not len(table):
        return []
    out = []
    for row in table[table["rank"] == rank].itertuples(index=False):
        e = {"name": label(row), "pid": rank, "tid": tid, "ts": (row.ts_ns - base) / 1e3,
             "args": {k: (v.item() if hasattr(v, "item") else v)
                      for k, v in row._asdict().items() if k not in ("ts_ns", "dur_ns")}}
        if row.dur_ns > 0:
            e.update(ph="X", dur=row.dur_ns / 1e3)
        else:
            e.update(ph="i", s="t")
        out.append(e)
    return out


def write_perfetto(run, path, force: bool = False) -> Path:
    """to_perfetto written to ``path`` (gzip when it ends with .gz); open in ui.perfetto.dev
    or chrome://tracing. Refused before any work (FileExistsError, one line) where it would
    replace a file nbtools did not write (a notebook, a saved run's file, a profiler trace,
    any other; ``force``: replace it), or where nothing can be written (a device, a folder,
    no permission). Written whole or not at all: a full disk leaves the old file as it was
    (common.atomic.WriteFailed names the file)."""
    why = output_refusal(path, "force=True", force=force)
    if why:
        raise FileExistsError(why)
    path = Path(path)
    data = _dumps(to_perfetto(run))
    write_file(path, gzip.compress(data, 6) if path.name.endswith(".gz") else data)
    return path
