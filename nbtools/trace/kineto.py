"""Raw Kineto columns of one rank -> one columnar events table (tables.EVENT_COLUMNS).

The only place that decides category, lane, step and graph: both sources in trace.py (the
live profiler and Kineto JSON files) reduce their input to the raw columns of ``RAW``
(Kineto category, name, pid, tid, ts, dur, correlation) and hand them to ``build``.

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

import re

import numpy as np
import pandas as pd

from nbtools.schema import tables
from nbtools.schema.tables import STEP_PATTERNS
from nbtools.common.privacy import scrub_home

GPU_KINDS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync"})
_CORR_KINDS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync"})
# "nbtools_step": ProfilerStep#N copies our Kineto export adds for HTA (results/trace_export.py)
# python_function: with_stack's Python frames, not ops (trace.details makes them stacks)
_DROP_KINDS = frozenset({"Trace", "ac2g", "fwdbwd", "async_cpu_to_gpu", "nbtools_step",
                         "python_function"})
_SYNC = re.compile(r"^(cuda|hip|cu)(DeviceSynchronize|StreamSynchronize|EventSynchronize|"
                   r"StreamWaitEvent|CtxSynchronize)")
_GRAPH_LAUNCH = re.compile(r"^(cuda|hip|cu)GraphLaunch")
_COMM_CPU = re.compile(r"^(nccl:|rccl:|gloo:|c10d::|_?c10d_functional::|record_param_comms)")
_CAT_INDEX = {c: i for i, c in enumerate(tables.CATEGORIES)}
RAW = ("kind", "name", "pid", "tid", "ts", "dur", "corr")


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


def build(rank: int, raw: dict, kinds: list, names: list, step_windows=None) -> dict:
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
        "name": _compact(name_codes, names, scrub_home),
        "ts_ns": ts, "dur_ns": dur, "step": step.astype(np.int32),
        "correlation": corr, "graph": graph,
    }
    return {c: wire[c] for c in tables.EVENT_COLUMNS}

