"""Kineto events -> one columnar events table (tables.EVENT_COLUMNS).

Two sources, one classifier: ``events_from_profiler`` reads a live torch.profiler session on
the engine (absolute ns from ``kineto_results.events()``, no JSON written) and
``load_traces`` reads the Kineto JSON any PyTorch job writes. Both reduce their input to the
same raw columns (Kineto category, name, pid, tid, ts, dur, correlation) and hand them to
``_build``, the only place that decides category, lane, step and graph.

Category decisions (documented here because analysis depends on them):
- GPU kernels named ``nccl*``/``rccl*`` are communication, every other kernel is compute.
  Prefix only, so new NCCL kernel families (``ncclSymDevKernel_*``) need no update.
- CPU-side collectives (``c10d::*``, ``_c10d_functional::*``, ``record_param_comms``,
  ``nccl:*``/``gloo:*`` ranges) are ``communication`` on their ``cpu:<tid>`` lane. For gloo
  that is the collective itself; for NCCL it is the host side of the launch. Analysis of a
  GPU rank only counts communication on ``cuda:`` lanes, so the two never add up.
- Blocking/ordering runtime calls (cuda/hip/cu ``*Synchronize``, ``*StreamWaitEvent``) and
  the GPU-side ``cuda_sync`` records are ``sync``; other runtime/driver calls are
  ``runtime``; user ranges (``ProfilerStep#N``, ``nbtools/step N``, record_function) are
  ``annotation``.
- ``graph`` is true for a GPU kernel/memcpy/memset whose correlation id is that of a
  ``cudaGraphLaunch``/``hipGraphLaunch``/``cuGraphLaunch`` call: replayed kernels carry no
  External id, the correlation is the only link.
"""
from __future__ import annotations

import gc
import json
import re
import zlib
from operator import itemgetter, methodcaller
from pathlib import Path

import numpy as np
import pandas as pd

from . import tables

try:
    import orjson
    _loads = _loads_view = orjson.loads
except ImportError:  # pragma: no cover - orjson is a dependency; json is the slow fallback
    _loads = json.loads

    def _loads_view(view):
        return json.loads(bytes(view))


class TraceError(ValueError):
    """A trace that cannot be loaded; the message names the file and what to do."""


GPU_KINDS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync"})
_CORR_KINDS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync"})
# "nbtools_step": ProfilerStep#N copies our Kineto export adds for HTA (trace_export.py)
_DROP_KINDS = frozenset({"Trace", "ac2g", "fwdbwd", "async_cpu_to_gpu", "nbtools_step"})
_SYNC = re.compile(r"^(cuda|hip|cu)(DeviceSynchronize|StreamSynchronize|EventSynchronize|"
                   r"StreamWaitEvent|CtxSynchronize)")
_GRAPH_LAUNCH = re.compile(r"^(cuda|hip|cu)GraphLaunch")
_COMM_CPU = re.compile(r"^(nccl:|rccl:|gloo:|c10d::|_?c10d_functional::|record_param_comms)")
STEP_PATTERNS = (re.compile(r"^nbtools/step (\d+)$"),           # ours: numbering of `steps`
                 re.compile(r"^ProfilerStep\s*#\s*(\d+)$"))      # torch.profiler's schedule
_HOME = re.compile(r"/(home|Users)/[^/\s]+")
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)", re.I)
_DIGITS = re.compile(r"-?\d+")
_CAT_INDEX = {c: i for i, c in enumerate(tables.CATEGORIES)}
_RAW = ("kind", "name", "pid", "tid", "ts", "dur", "corr")


def classify(kind: str, name: str):
    """Kineto category + name -> one of tables.CATEGORIES, or None to drop the event."""
    if kind in _DROP_KINDS:
        return None
    if kind == "gpu_user_annotation":   # spans kernels (even when named nccl:...): not work
        return "annotation"
    if kind == "kernel":
        return "communication" if name[:4].lower() in ("nccl", "rccl") else "compute"
    if kind == "gpu_memcpy":
        return "memcpy"
    if kind == "gpu_memset":
        return "memset"
    if kind == "cuda_sync":
        return "sync"
    if kind.endswith(("_runtime", "_driver")):
        return "sync" if _SYNC.match(name) else "runtime"
    if _COMM_CPU.match(name):
        return "communication"
    if kind == "user_annotation":
        return "annotation"
    return "cpu_op"


def _is_correlated(kind: str) -> bool:
    return kind in _CORR_KINDS or kind.endswith(("_runtime", "_driver"))


def _compact(codes: np.ndarray, uniques: list, fix=None):
    """Drop unused strings and merge duplicates (after ``fix``); codes -> int32."""
    used = np.zeros(len(uniques) + 1, bool)
    used[codes] = True
    keep = np.flatnonzero(used[:len(uniques)])
    names = [uniques[i] for i in keep]
    if fix is not None:
        names = [fix(s) for s in names]
    new, final = pd.factorize(pd.Series(names, dtype=object))
    remap = np.full(len(uniques), -1, np.int64)
    remap[keep] = new
    return remap[codes].astype(np.int32), [str(s) for s in final]


def _scrub(name: str) -> str:
    return _HOME.sub("~", name) if "/" in name else name


def _windows_from_annotations(names: list, codes, cpu, ts, dur):
    """Step windows from ``nbtools/step N`` ranges, else ``ProfilerStep#N``."""
    for pattern in STEP_PATTERNS:
        num = np.array([int(m.group(1)) if (m := pattern.match(s)) else -1 for s in names]
                       + [-1], np.int64)
        rows = np.flatnonzero((num[codes] >= 0) & cpu)
        if len(rows):
            return num[codes[rows]], ts[rows], ts[rows] + dur[rows]
    return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)


def _step_of(ts, steps, starts, ends):
    """Step whose [start, end) holds ts; -1 outside every window (vectorised)."""
    out = np.full(len(ts), -1, np.int64)
    if len(steps) == 0:
        return out
    order = np.argsort(starts, kind="stable")
    steps, starts, ends = steps[order], starts[order], ends[order]
    i = np.searchsorted(starts, ts, side="right") - 1
    ok = i >= 0
    ok[ok] &= ts[ok] < ends[i[ok]]
    out[ok] = steps[i[ok]]
    return out


def _build(rank: int, raw: dict, kinds: list, names: list, step_windows=None) -> dict:
    """Raw columns of one rank (``raw``: kind, name codes; pid, tid, ts, dur ns, corr; taken
    out of the dict as they are used, so the originals die early) -> EVENT_COLUMNS wire
    form. Vectorised over events; python only touches the unique (kind, name) pairs."""
    n_names = max(len(names), 1)
    kind_codes, name_codes = raw.pop("kind").astype(np.int64), raw.pop("name").astype(np.int64)
    pair_codes, pairs = pd.factorize(kind_codes * n_names + name_codes)
    pair_cat = np.array([_CAT_INDEX.get(classify(kinds[p // n_names], names[p % n_names]), -1)
                         for p in pairs] + [-1], np.int8)
    category = pair_cat[pair_codes]
    del pair_codes
    keep = np.flatnonzero(category >= 0)
    ts = raw.pop("ts")
    keep = keep[np.argsort(ts[keep], kind="stable")]
    ts = ts[keep]
    category, kind_codes, name_codes = category[keep], kind_codes[keep], name_codes[keep]
    pid, tid = raw.pop("pid")[keep], raw.pop("tid")[keep]
    dur = np.maximum(raw.pop("dur")[keep], 0)
    kind_gpu = np.array([k in GPU_KINDS for k in kinds] + [False])
    kind_corr = np.array([_is_correlated(k) for k in kinds] + [False])
    gpu = kind_gpu[kind_codes]
    corr = np.where(kind_corr[kind_codes], raw.pop("corr")[keep], -1)
    del kind_codes, keep

    # lanes: cpu:<tid> (the process does not matter) or cuda:<device>:<stream>
    # GPU keys carry the sign bit, CPU keys never do: one int64 factorize for both kinds
    key = np.where(gpu, ((pid & 0x7FFFFFFF) << 32) | (tid & 0xFFFFFFFF) | np.int64(-2**63),
                   tid & 0x7FFFFFFFFFFFFFFF)
    lane_codes, _ = pd.factorize(key)
    first = np.zeros(lane_codes.max() + 1 if len(lane_codes) else 0, np.int64)
    first[lane_codes[::-1]] = np.arange(len(lane_codes))[::-1]
    lanes = [f"cuda:{pid[i]}:{tid[i]}" if gpu[i] else f"cpu:{tid[i]}" for i in first]

    # steps: CPU events by time; GPU events through the CPU call that launched them
    cpu = ~gpu
    if step_windows is not None and len(step_windows):
        w = np.asarray(step_windows, np.int64).reshape(-1, 3)
        steps, starts, ends = w[:, 0], w[:, 1], w[:, 2]
    else:
        steps, starts, ends = _windows_from_annotations(
            names, name_codes, cpu & (category == _CAT_INDEX["annotation"]), ts, dur)
    step = _step_of(ts, steps, starts, ends)
    launch = np.flatnonzero(cpu & (corr >= 0))
    order = launch[np.argsort(corr[launch], kind="stable")]
    lc = corr[order]
    g = np.flatnonzero(gpu & (corr >= 0))
    pos = np.minimum(np.searchsorted(lc, corr[g]), max(len(lc) - 1, 0))
    hit = (lc[pos] == corr[g]) if len(lc) else np.zeros(len(g), bool)
    step[g[hit]] = step[order[pos[hit]]]

    graph_name = np.array([bool(_GRAPH_LAUNCH.match(s)) for s in names] + [False])
    launches = corr[cpu & graph_name[name_codes] & (corr >= 0)]
    busy = np.isin(category, [_CAT_INDEX[c] for c in ("compute", "communication", "memcpy",
                                                      "memset")])
    graph = gpu & busy & np.isin(corr, launches)

    n = len(ts)
    wire = {
        "rank": np.full(n, rank, np.int32),
        "lane": (lane_codes.astype(np.int32), lanes),
        "category": (category.astype(np.int32), list(tables.CATEGORIES)),
        "name": _compact(name_codes, names, _scrub),
        "ts_ns": ts, "dur_ns": dur, "step": step.astype(np.int32),
        "correlation": corr, "graph": graph,
    }
    return {c: wire[c] for c in tables.EVENT_COLUMNS}


def _intern(values, table: dict) -> np.ndarray:
    """Strings -> codes in ``table`` (shared across batches). A C-level dict lookup per
    value; new strings (rare after the first batches) are added first."""
    try:
        return np.fromiter(map(table.__getitem__, values), np.int32, len(values))
    except KeyError:
        for v in dict.fromkeys(values):
            table.setdefault(v, len(table))
        return np.fromiter(map(table.__getitem__, values), np.int32, len(values))


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
    return _build(rank, dict(zip(_RAW, cols)), _table_list(kinds), _table_list(names),
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
# Kineto JSON

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_SEP = re.compile(rb"\s*,\s*\{")
_X_FIELDS = itemgetter("cat", "name", "pid", "tid", "ts", "dur")
_PH = itemgetter("ph")
_ARGS = methodcaller("get", "args", {})
_CORR = methodcaller("get", "correlation", -1)
_CHUNK = 256 << 10   # small batches: the dicts of one batch die before the next (cache, memory)


class _Columns:
    """Raw columns accumulated batch by batch, so parsed dicts never outlive their batch."""

    def __init__(self):
        self.kinds, self.names = {}, {}
        self.parts = []

    def add(self, events) -> None:
        # C-level maps (itemgetter/methodcaller) instead of per-event python: this loop
        # is most of the load time. Anything unusual falls back to the forgiving path.
        try:
            xs = [e for e, ph in zip(events, map(_PH, events)) if ph == "X"]
            if not xs:
                return
            rows = list(map(_X_FIELDS, xs))
            corr = list(map(_CORR, map(_ARGS, xs)))
        except (KeyError, TypeError, AttributeError):
            xs = [e for e in events if type(e) is dict and e.get("ph") == "X"
                  and e.get("ts") is not None]
            rows = [(e.get("cat", ""), e.get("name", ""), e.get("pid", 0), e.get("tid", 0),
                     e["ts"], e.get("dur", 0)) for e in xs]
            corr = [a.get("correlation", -1) if type(a) is dict else -1
                    for a in (e.get("args") for e in xs)]
            if not rows:
                return
        cat, name, pid, tid, ts, dur = zip(*rows)
        self.parts.append((_intern(cat, self.kinds), _intern(name, self.names), _ints(pid),
                           _ints(tid), _to_ns(ts), _to_ns(dur), _ints(corr)))

    def columns(self) -> dict:
        """The raw columns (see _build), concatenated; the batches are released."""
        parts, self.parts = self.parts, []
        return {key: np.concatenate([p[i] for p in parts] or [np.zeros(0, np.int64)])
                for i, key in enumerate(_RAW)}


def _ints(values) -> np.ndarray:
    a = np.asarray(values)
    if a.dtype.kind in "iu":
        return a.astype(np.int64)
    # "Spans", "stream 7", 7.0: keep the digits, -1 when there are none
    return np.array([int(v) if isinstance(v, (int, float)) else
                     int(m.group()) if (m := _DIGITS.search(str(v))) else -1
                     for v in values], np.int64)


def _to_ns(values) -> np.ndarray:
    """Microseconds (int or float) -> ns. Integer and fraction are converted separately so
    epoch-µs floats keep what float64 holds (about 0.25 µs in 2024) instead of losing more
    in ts*1000."""
    a = np.asarray(values)
    if a.dtype.kind in "iu":
        return a.astype(np.int64) * 1000
    a = np.asarray([float(v) if v is not None else 0.0 for v in values]) if a.dtype == object \
        else a.astype(np.float64)
    whole = np.floor(a)
    return whole.astype(np.int64) * 1000 + np.rint((a - whole) * 1000).astype(np.int64)


def _chunks(path: Path):
    """Decompressed pieces of about _CHUNK bytes (gzip detected by its magic bytes)."""
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        if not gz:
            while piece := fh.read(_CHUNK):
                yield piece
            return
        d, data = zlib.decompressobj(31), b""
        while True:
            if not data and not (data := fh.read(1 << 16)):
                break
            piece = d.decompress(data, _CHUNK)
            if piece:
                yield piece
            if d.eof:   # concatenated gzip members are one file
                data = d.unused_data or fh.read(1 << 16)
                if not data.strip(b"\0"):
                    return
                d = zlib.decompressobj(31)
            else:
                data = d.unconsumed_tail
        if not d.eof:
            raise EOFError("the compressed data ends early (truncated .gz)")


def _read_trace(path) -> tuple[dict, _Columns]:
    """One Kineto JSON file -> (top-level metadata, raw columns), streaming: the events
    array is cut at event boundaries into small batches, each parsed and reduced to columns
    before the next is read, so memory stays near the size of the columns."""
    path = Path(path)
    cols = _Columns()
    head, buf, streaming, misses = None, bytearray(), True, 0
    was_enabled = gc.isenabled()
    gc.disable()   # batches are acyclic dicts: collections would rescan them for nothing
    try:
        for chunk in _chunks(path):
            buf += chunk
            if head is None:   # from here on buf starts with the events array's '['
                if buf.lstrip()[:1] == b"[":   # Chrome's JSON Array Format: a bare list
                    head, buf = b"", buf[buf.index(b"["):]
                elif m := _EVENTS_KEY.search(buf):
                    head, buf = bytes(buf[:m.end() - 1]), buf[m.end() - 1:]
            if head is not None and streaming:
                if _cut(buf, cols):
                    misses = 0
                else:
                    misses += 1
                    streaming = misses < 64   # give up cutting; parse the rest at once
        doc = _loads((head or b"") + bytes(buf))
    except (OSError, EOFError, zlib.error) as e:
        raise TraceError(f"{path}: cannot be read as a gzip or plain file ({e}). "
                         "If it was copied while the job wrote it, copy it again.") from None
    except ValueError as e:
        raise TraceError(f"{path}: is not valid JSON ({e}). The file may be truncated (the "
                         "profiler was stopped while writing): export the trace again.") from None
    finally:
        if was_enabled:
            gc.enable()
    if isinstance(doc, list):
        cols.add(doc)
        return {}, cols
    if not isinstance(doc, dict) or "traceEvents" not in doc:
        raise TraceError(f"{path}: has no 'traceEvents': it is not a Kineto/Chrome trace. "
                         "Pass the file torch.profiler wrote (export_chrome_trace or "
                         "tensorboard_trace_handler).")
    if not isinstance(doc["traceEvents"], list):
        raise TraceError(f"{path}: 'traceEvents' is not a list of events.")
    cols.add(doc.pop("traceEvents"))
    return doc, cols


def _cut(buf: bytearray, cols: _Columns) -> bool:
    """Parse the longest prefix of ``buf`` ('[' + events) that ends at an event boundary,
    in place: the separator byte after the last '}' becomes ']' for the parse, then the one
    before the next '{' becomes the new '['. A '}' followed by ', {' inside a string or a
    nested object leaves invalid JSON; then the next earlier candidate is tried."""
    end = len(buf)
    for _ in range(8):
        k = buf.rfind(b"}", 0, end)
        if k < 0:
            return False
        m = _SEP.match(buf, k + 1)
        if m is not None:
            saved, buf[k + 1] = buf[k + 1], 93   # ']'
            try:
                with memoryview(buf) as view, view[:k + 2] as prefix:
                    events = _loads_view(prefix)
            except ValueError:
                events = None
            buf[k + 1] = saved
            if events is not None:
                cols.add(events)
                buf[m.end() - 2] = 91   # '['
                del buf[:m.end() - 2]
                return True
        end = k
    return False


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
        meta, cols = _read_trace(f)
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
        wire = _build(r, raw, _table_list(cols.kinds), _table_list(cols.names))
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
