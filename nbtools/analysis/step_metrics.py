"""Pure metrics on the events table (tables.EVENT_COLUMNS): no plotting, no torch.

Definitions follow HolisticTraceAnalysis (HTA) so numbers can be compared with it:

- Times are interval *unions* (a stream overlapping another counts once), per rank, over
  every ``cuda:`` lane of the rank. compute = kernels that are not communication;
  communication = NCCL/RCCL kernels (see kineto_events.classify).
- ``overlap_pct`` = time where communication kernels run while some compute kernel runs,
  over total communication time: ``|C ∩ K| / |C|`` (HTA ``get_comm_comp_overlap``).
- ``exposed_comm_ms`` = communication time not overlapped by compute: ``|C| - |C ∩ K|``.
- ``idle_ms`` = (last GPU activity end - first start) - ``|union of GPU activity|``, and
  ``gpu_busy_pct`` = ``|union|`` / that span (HTA temporal breakdown). GPU activity = kernels,
  memcpy, memset (``idle_gaps`` lists the gaps). An NCCL kernel waiting for its peers
  counts as busy: read compute_ms and exposed_comm_ms beside it.
- ``graph_coverage_pct`` = kernel time (sum of durations) with graph=True / all kernel time.
- ``queue_delay_us`` = kernel start - start of the CPU runtime call that launched it (same
  correlation id). HTA's "launch delay" subtracts the call's duration as well; ours is the
  whole host-to-device queueing. Graph-replayed kernels count from their cudaGraphLaunch.

A rank with no GPU activity (a CPU-only run) is measured on its ``cpu:`` lanes instead:
compute = cpu_op events, communication = CPU-side collectives (gloo), busy/idle over the
span of those; the GPU-only columns (gpu_busy_pct, graph_coverage_pct, queue delay) are NaN
and the kernel counts 0. ``device`` says which was used; ``cpu_busy_pct`` is always given.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from nbtools.analysis.keyed import (group_median, lookup, measure_ns, pair_codes,  # noqa: F401
                                    union_ns)
from nbtools.schema.tables import STEP_PATTERNS, string_codes

PER_RANK_COLUMNS = ["rank", "gpu_busy_pct", "compute_busy_pct", "compute_ms", "comm_ms", "memcpy_ms", "overlap_pct",
                    "exposed_comm_ms", "idle_ms", "graph_coverage_pct", "kernels",
                    "comm_kernels", "graph_kernels", "queue_delay_us_median", "syncs"]


def _lane_is_gpu(events: pd.DataFrame) -> np.ndarray:
    codes, lanes = string_codes(events["lane"])
    return np.append(np.asarray(lanes.str.startswith("cuda:"), bool), False)[codes]


def event_columns(events: pd.DataFrame) -> dict:
    """Per-row numpy views the metrics share: category masks, lane kind, ends."""
    code, names = string_codes(events["category"])

    def is_(*wanted):
        return np.append(np.isin(np.asarray(names), wanted), False)[code]

    gpu = _lane_is_gpu(events)
    lane_code = np.asarray(events["lane"].astype("category").cat.codes, np.int64)
    ts = events["ts_ns"].to_numpy(np.int64)
    c = dict(ts=ts, end=ts + events["dur_ns"].to_numpy(np.int64), gpu=gpu, lane_code=lane_code,
             rank=events["rank"].to_numpy(np.int64), graph=events["graph"].to_numpy(bool),
             corr=events["correlation"].to_numpy(np.int64), dur=events["dur_ns"].to_numpy(np.int64),
             compute=is_("compute"), comm=is_("communication"), memcpy=is_("memcpy"),
             sync=is_("sync"), cpu_op=is_("cpu_op"), launch=is_("runtime", "sync"),
             busy=is_("compute", "communication", "memcpy", "memset"))
    ranks_with_gpu = np.unique(c["rank"][gpu & c["busy"]])
    c["gpu_rank"] = np.isin(c["rank"], ranks_with_gpu)
    c["kernel"] = gpu & (c["compute"] | c["comm"])
    return c


def _metrics(c: dict, group: np.ndarray, n: int) -> dict:
    """Every per-group metric (name -> array); rows with group < 0 are left out."""
    inside = group >= 0
    g_all = np.where(inside, group, 0)
    mode_gpu = c["gpu_rank"]
    cpu_lane = ~c["gpu"]
    comp = np.where(mode_gpu, c["gpu"] & c["compute"], cpu_lane & c["cpu_op"]) & inside
    comm = np.where(mode_gpu, c["gpu"], cpu_lane) & c["comm"] & inside
    busy = np.where(mode_gpu, c["gpu"] & c["busy"], cpu_lane & (c["cpu_op"] | c["comm"])) & inside
    cpu_busy = cpu_lane & (c["cpu_op"] | c["comm"]) & inside

    def union(mask):
        return union_ns(g_all[mask], c["ts"][mask], c["end"][mask], n)

    def span(mask):
        lo = np.full(n, np.iinfo(np.int64).max)
        hi = np.full(n, np.iinfo(np.int64).min)
        np.minimum.at(lo, g_all[mask], c["ts"][mask])
        np.maximum.at(hi, g_all[mask], c["end"][mask])
        return np.where(hi >= lo, hi - lo, 0).astype(float)

    def count(mask):
        return np.bincount(g_all[mask & inside], minlength=n)

    k_comp, k_comm, k_busy = union(comp), union(comm), union(busy)
    overlap = k_comp + k_comm - union(comp | comm)
    cpu_groups = np.bincount(g_all[inside & mode_gpu], minlength=n) == 0   # no GPU rows
    if cpu_groups.any():
        # on the cpu: lanes only, as busy (and so idle) is: a CPU rank's row on another
        # lane counted in compute but not in the span could put the parts above the window
        k_comp, k_comm, overlap = _cpu_comm_metrics(c, g_all, inside & ~mode_gpu & cpu_lane, n,
                                                    (k_comp, k_comm, overlap), cpu_groups)
    busy_span, cpu_span = span(busy), span(cpu_busy)
    is_gpu = np.zeros(n, bool)
    is_gpu[g_all[inside & mode_gpu]] = True
    kernel = c["kernel"] & inside
    kernel_ns = np.bincount(g_all[kernel], weights=c["dur"][kernel], minlength=n)
    graph_ns = np.bincount(g_all[kernel & c["graph"]], weights=c["dur"][kernel & c["graph"]],
                           minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            "gpu_busy_pct": np.where(is_gpu, 100 * k_busy / busy_span, np.nan),
            # An NCCL kernel's time includes waiting for its peers: busy counting it looks
            # healthy while the GPU waits. Compute-busy is what did work.
            "compute_busy_pct": np.where(busy_span > 0, 100 * k_comp / busy_span, np.nan),
            "compute_ms": k_comp / 1e6, "comm_ms": k_comm / 1e6,
            "memcpy_ms": union(c["gpu"] & c["memcpy"] & inside) / 1e6,
            "overlap_pct": np.where(k_comm > 0, 100 * overlap / k_comm, np.nan),
            "exposed_comm_ms": (k_comm - overlap) / 1e6,
            "idle_ms": (busy_span - k_busy) / 1e6,
            "graph_coverage_pct": np.where(kernel_ns > 0, 100 * graph_ns / kernel_ns, np.nan),
            "kernels": count(c["kernel"]), "comm_kernels": count(c["kernel"] & c["comm"]),
            "graph_kernels": count(c["kernel"] & c["graph"]),
            "queue_delay_us_median": _queue_delay_median(c, g_all, inside, n),
            "syncs": count(cpu_lane & c["sync"]),
            "device": np.where(is_gpu, "gpu", "cpu"),
            "cpu_busy_pct": np.where(cpu_span > 0, 100 * union(cpu_busy) / cpu_span, np.nan),
        }


def _cpu_comm_metrics(c, g_all, rows, n, gpu_values, cpu_groups):
    """CPU ranks: a thread blocked in a collective (gloo's all_reduce, a functional
    collective's wait_tensor) is not computing, although the CPU op that called it spans
    the wait. So compute is CPU-op time minus collectives on the same thread; communication
    is collective time on any thread; overlap is compute while another thread (gloo's
    worker) communicates."""
    lane_codes = c["lane_code"]
    key = c["rank"] * (lane_codes.max() + 2) + lane_codes
    calling = np.isin(key, np.unique(key[rows & c["cpu_op"]]))
    lab = np.full(len(key), -1)
    lab[rows & c["cpu_op"]] = 0
    lab[rows & c["comm"] & calling] = 1
    lab[rows & c["comm"] & ~calling] = 2
    m = lab >= 0
    args = (g_all[m], c["ts"][m], c["end"][m], lab[m], 3, n)
    comp = measure_ns(*args, lambda k: (k[:, 0] > 0) & (k[:, 1] == 0))
    comm = measure_ns(*args, lambda k: (k[:, 1] > 0) | (k[:, 2] > 0))
    over = measure_ns(*args, lambda k: (k[:, 0] > 0) & (k[:, 1] == 0) & (k[:, 2] > 0))
    k_comp, k_comm, overlap = gpu_values
    return (np.where(cpu_groups, comp, k_comp), np.where(cpu_groups, comm, k_comm),
            np.where(cpu_groups, over, overlap))


def _queue_delay_median(c: dict, g_all, inside, n: int) -> np.ndarray:
    if "queue_delays" not in c:   # the same for per_rank and per_step: joined once a load
        c["queue_delays"] = _queue_delays(c)
    kernel_rows, delay_ns = c["queue_delays"]
    keep = inside[kernel_rows]
    # numpy, not a groupby (~0.5 ms whatever the size); the same medians
    return group_median(g_all[kernel_rows[keep]], delay_ns[keep] / 1e3, n)


def _queue_delays(c: dict):
    """(kernel row indices, kernel start - launching CPU call start in ns)."""
    k = np.flatnonzero(c["kernel"] & (c["corr"] >= 0))
    lr = launchers(c, k)
    return k[lr >= 0], c["ts"][k[lr >= 0]] - c["ts"][lr[lr >= 0]]


def launchers(c: dict, rows: np.ndarray) -> np.ndarray:
    """The CPU runtime call (row index) that launched each GPU row in ``rows``, -1 where the
    trace has none: joined on (rank, correlation); correlation ids are only unique within a
    rank. A graph-replayed kernel's is its cudaGraphLaunch."""
    out = np.full(len(rows), -1, np.int64)
    if "launch_rows" not in c:        # the sorted launches once per event_columns
        launch = np.flatnonzero(~c["gpu"] & c["launch"] & (c["corr"] >= 0))
        c["launch_rows"] = launch[np.lexsort((c["corr"][launch], c["rank"][launch]))]
    lr = c["launch_rows"]
    if not len(lr) or not len(rows):
        return out
    ok = c["corr"][rows] >= 0
    # one int key per (rank, correlation): ranks are small, correlations below 2**40
    span = np.int64(1) << 40
    lkey = c["rank"][lr] * span + c["corr"][lr]
    want = c["rank"][rows] * span + c["corr"][rows]
    pos = np.minimum(np.searchsorted(lkey, want), len(lr) - 1)
    hit = ok & (lkey[pos] == want)
    out[hit] = lr[pos[hit]]
    return out


def per_rank(events: pd.DataFrame, *, _c: dict | None = None,
             _ranges: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per rank: PER_RANK_COLUMNS, then device (gpu | cpu: what was measured),
    cpu_busy_pct, annotated_steps and annotated_step_ms (median of the step ranges).
    ``_c`` / ``_ranges``: ``event_columns(events)`` / ``step_times(events, spans=False)`` when
    the caller has them already (breakdown.rank_table)."""
    if len(events) == 0:
        return pd.DataFrame(columns=PER_RANK_COLUMNS + ["device", "cpu_busy_pct",
                                                        "annotated_steps", "annotated_step_ms"])
    c = event_columns(events) if _c is None else _c
    group, ranks = pd.factorize(c["rank"], sort=True)   # np.unique's inverse sorts: 4x slower
    out = pd.DataFrame({"rank": ranks, **_metrics(c, group.astype(np.int64), len(ranks))})
    st = step_times(events, spans=False) if _ranges is None else _ranges
    # each range's rank among the sorted ranks, then counts and medians in numpy (a groupby
    # and two maps: ~1 ms whatever the size); the same numbers
    at = np.minimum(np.searchsorted(ranks, st["rank"].to_numpy()), len(ranks) - 1)
    ok = ranks[at] == st["rank"].to_numpy()
    out["annotated_steps"] = np.bincount(at[ok], minlength=len(ranks)).astype(int)
    out["annotated_step_ms"] = group_median(at[ok], st["step_ms"].to_numpy(float)[ok],
                                            len(ranks))
    return out


def per_step(events: pd.DataFrame, *, _c: dict | None = None,
             _spans: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (rank, step >= 0): step_ms plus the per_rank metrics inside that step
    (GPU events belong to the step of the CPU call that launched them). ``_c`` /
    ``_spans``: ``event_columns(events)`` / ``step_times(events)`` when the caller has them."""
    if len(events) == 0:
        return pd.DataFrame(columns=["rank", "step", "step_ms"] + PER_RANK_COLUMNS[1:])
    c = event_columns(events) if _c is None else _c
    step = events["step"].to_numpy(np.int64)
    codes, rank, pstep = pair_codes(c["rank"], step)
    m = _metrics(c, np.where(step >= 0, codes, -1).astype(np.int64), len(rank))
    # the rows kept and sorted, and step_ms looked up, in numpy: one frame built, not
    # filtered, indexed, sorted and reindexed (about 1 ms each, whatever the size)
    keep = np.flatnonzero(pstep >= 0)
    keep = keep[np.lexsort((pstep[keep], rank[keep]))]
    st = step_times(events) if _spans is None else _spans
    at = lookup(rank[keep], pstep[keep], st["rank"].to_numpy(), st["step"].to_numpy())
    if at is None:   # a (rank, step) range twice: pandas' .get, as before
        ms = st.set_index(["rank", "step"])["step_ms"]
        step_ms = [ms.get((r, s), np.nan) for r, s in zip(rank[keep], pstep[keep])]
    else:
        step_ms = np.where(at >= 0, st["step_ms"].to_numpy(float)[at], np.nan) if len(at) else []
    return pd.DataFrame({"rank": rank[keep], "step": pstep[keep], "step_ms": step_ms,
                         **{k: v[keep] for k, v in m.items()}})


def step_times(events: pd.DataFrame, spans: bool = True, *,
               _ranges: pd.DataFrame | None = None) -> pd.DataFrame:
    """rank, step, ts_ns, dur_ns, step_ms from the step ranges on CPU lanes (``nbtools/step
    N`` preferred, else ``ProfilerStep#N``). With ``spans``, a rank without such ranges gets
    the span of its events of each step instead. ``_ranges``: ``step_times(events,
    spans=False)`` when the caller has it."""
    cols = ["rank", "step", "ts_ns", "dur_ns", "step_ms"]
    if len(events) == 0:
        return pd.DataFrame({c: np.zeros(0, np.int64) for c in cols})
    rank = events["rank"].to_numpy(np.int64)
    out = _step_ranges(events, rank) if _ranges is None else _ranges[cols[:4]]
    rest = ~np.isin(rank, np.asarray(out["rank"])) & (events["step"].to_numpy() >= 0)
    if _ranges is not None and not (spans and rest.any()):
        return _ranges.copy()   # nothing to add: the ranges are the table (sorted already)
    if spans and rest.any():
        rest = events[rest]
        span = rest.assign(end=rest["ts_ns"] + rest["dur_ns"]).groupby(
            ["rank", "step"], observed=True).agg(ts_ns=("ts_ns", "min"), end=("end", "max"))
        span = span.reset_index()
        span["dur_ns"] = span["end"] - span["ts_ns"]
        out = pd.concat([pd.DataFrame(out), span[cols[:4]].astype(np.int64)], ignore_index=True)
    # a stable lexsort and one frame: sort_values and reset_index were ~0.5 ms for 3 rows
    out = {k: np.asarray(out[k], np.int64) for k in cols[:4]}
    order = np.lexsort((out["step"], out["rank"]))
    return pd.DataFrame({**{k: v[order] for k, v in out.items()},
                         "step_ms": out["dur_ns"][order] / 1e6})


def _step_ranges(events: pd.DataFrame, rank: np.ndarray) -> dict:
    rows = step_range_rows(events, rank)
    return {"rank": rank[rows], "step": events["step"].to_numpy(np.int64)[rows],
            "ts_ns": events["ts_ns"].to_numpy(np.int64)[rows],
            "dur_ns": events["dur_ns"].to_numpy(np.int64)[rows]}


def step_range_rows(events: pd.DataFrame, rank: np.ndarray | None = None) -> np.ndarray:
    """Rows of the step ranges on CPU lanes: ``nbtools/step N``, else (per rank)
    ``ProfilerStep#N``."""
    if rank is None:
        rank = events["rank"].to_numpy(np.int64)
    code, names = string_codes(events["name"])
    ann = np.asarray(events["category"] == "annotation") & ~_lane_is_gpu(events)
    found = []
    for pattern in STEP_PATTERNS:
        # re on each distinct name (str.match on arrow strings parsed the pattern anew on
        # every call: 0.75 ms, four calls per load)
        hit = np.array([pattern.match(n) is not None for n in names] + [False], bool)
        found.append(np.flatnonzero(ann & hit[code]))
    ours, kineto = found
    return np.concatenate([ours, kineto[~np.isin(rank[kineto], rank[ours])]])


def idle_gaps(events: pd.DataFrame, min_us: float = 0.0) -> pd.DataFrame:
    """Every gap in a rank's GPU activity (kernels, memcpy, memset on any stream) of at
    least ``min_us``: rank, ts_ns (where the GPU went idle), dur_ns, step (of the activity
    before the gap). CPU-only ranks have none. Their sum per rank is per_rank's idle_ms."""
    cols = ["rank", "ts_ns", "dur_ns", "step"]
    c = event_columns(events) if len(events) else None
    if c is None or not (c["gpu"] & c["busy"]).any():
        return pd.DataFrame({k: np.zeros(0, np.int64) for k in cols})
    rows = np.flatnonzero(c["gpu"] & c["busy"])
    rows = rows[np.lexsort((c["ts"][rows], c["rank"][rows]))]
    rank, s, e = c["rank"][rows], c["ts"][rows], c["end"][rows]
    same = np.r_[False, rank[1:] == rank[:-1]]
    # running max of ends within a rank: the same cummax sweep as union_ns, reset per rank
    cover = pd.Series(e).groupby(rank).cummax().to_numpy()
    prev_cover = np.r_[np.int64(0), cover[:-1]]
    gap = np.where(same, s - prev_cover, 0)
    at = np.flatnonzero(gap >= max(min_us * 1e3, 1))
    step = events["step"].to_numpy(np.int64)[rows]
    return pd.DataFrame({"rank": rank[at], "ts_ns": prev_cover[at], "dur_ns": gap[at],
                         "step": step[at - 1]})


def slowest_rank_per_step(events: pd.DataFrame) -> pd.DataFrame:
    """Per step: the slowest and fastest rank, their step_ms, the median and the spread
    (max - min) / median in percent."""
    st = step_times(events)
    cols = ["step", "ranks", "slowest_rank", "slowest_ms", "fastest_rank", "fastest_ms",
            "median_ms", "spread_pct"]
    if len(st) == 0:
        return pd.DataFrame(columns=cols)
    g = st.groupby("step")["step_ms"]
    slow, fast = st.loc[g.idxmax()], st.loc[g.idxmin()]
    out = pd.DataFrame({"step": slow["step"].to_numpy(), "ranks": g.size().to_numpy(),
                        "slowest_rank": slow["rank"].to_numpy(),
                        "slowest_ms": slow["step_ms"].to_numpy(),
                        "fastest_rank": fast["rank"].to_numpy(),
                        "fastest_ms": fast["step_ms"].to_numpy(),
                        "median_ms": g.median().to_numpy()})
    out["spread_pct"] = 100 * (out["slowest_ms"] - out["fastest_ms"]) / out["median_ms"]
    return out[cols]


def collective_skew(events: pd.DataFrame) -> pd.DataFrame:
    """Start skew of each collective across ranks: the k-th communication kernel of one
    name on each rank is taken to be the same collective. skew_us = latest start -
    earliest start; last_rank (the latest to arrive) is the one the others waited for.
    Uses GPU communication kernels, or CPU-side collectives when the run has none."""
    cols = ["name", "k", "ranks", "first_rank", "last_rank", "skew_us", "ts_ns", "step"]
    if len(events) == 0:
        return pd.DataFrame(columns=cols)
    c = event_columns(events)
    mask = c["gpu"] & c["comm"]
    if not mask.any():
        mask = ~c["gpu"] & c["comm"]
    ev = events[mask][["rank", "name", "ts_ns", "step"]].copy()
    ev["name"] = ev["name"].astype(str)
    ev = ev.sort_values(["rank", "ts_ns"], kind="stable")
    ev["k"] = ev.groupby(["rank", "name"]).cumcount()
    g = ev.groupby(["name", "k"])
    first, last = ev.loc[g["ts_ns"].idxmin()], ev.loc[g["ts_ns"].idxmax()]
    out = pd.DataFrame({"name": first["name"].to_numpy(), "k": first["k"].to_numpy(),
                        "ranks": g.size().to_numpy(), "first_rank": first["rank"].to_numpy(),
                        "last_rank": last["rank"].to_numpy(),
                        "skew_us": (last["ts_ns"].to_numpy() - first["ts_ns"].to_numpy()) / 1e3,
                        "ts_ns": first["ts_ns"].to_numpy(), "step": first["step"].to_numpy()})
    return out[out["ranks"] > 1].sort_values("ts_ns").reset_index(drop=True)[cols]


def top_kernels(events: pd.DataFrame, n: int = 20) -> pd.DataFrame:
    """The n GPU kernels with the most total time over all ranks (cpu_op events when the
    run has no kernels): count, total_ms, mean_us, max_us, pct of kernel time, ranks."""
    cols = ["name", "category", "count", "total_ms", "mean_us", "max_us", "pct", "ranks"]
    if len(events) == 0:
        return pd.DataFrame(columns=cols)
    c = event_columns(events)
    mask = c["kernel"] if c["kernel"].any() else (~c["gpu"] & c["cpu_op"])
    ev = events[mask][["name", "category", "dur_ns", "rank"]].copy()
    ev["name"] = ev["name"].astype(str)
    ev["category"] = ev["category"].astype(str)
    g = ev.groupby(["name", "category"])
    out = g.agg(count=("dur_ns", "size"), total=("dur_ns", "sum"), mean=("dur_ns", "mean"),
                mx=("dur_ns", "max"), ranks=("rank", "nunique")).reset_index()
    total = out["total"].sum()
    out["total_ms"] = out["total"] / 1e6
    out["mean_us"], out["max_us"] = out["mean"] / 1e3, out["mx"] / 1e3
    out["pct"] = 100 * out["total"] / total if total else np.nan
    return out.sort_values("total", ascending=False).head(n).reset_index(drop=True)[cols]


def category_ms(events: pd.DataFrame, steps: pd.DataFrame) -> pd.Series:
    """Time per event category per profiled step and rank (ms), each instant counted once
    per lane: nested CPU ranges of one category on one thread (an op inside an op) count
    once, the same category on two lanes (two streams, two threads) counts on each. Without
    a steps table, per rank."""
    if not len(events):
        return pd.Series(dtype=float)
    cat = events["category"].astype(str)
    key = pd.MultiIndex.from_arrays([events["rank"].to_numpy(), events["lane"].astype(str),
                                     cat.to_numpy()])
    codes, uniq = pd.factorize(key)
    ts = events["ts_ns"].to_numpy(np.int64)
    ns = union_ns(codes.astype(np.int64), ts, ts + events["dur_ns"].to_numpy(np.int64),
                  len(uniq))
    tot = pd.Series(ns, index=uniq.get_level_values(2)).groupby(level=0).sum()
    rows = int((steps["phase"] == "profiled").sum()) if len(steps) else 0
    return tot / 1e6 / (rows or max(int(events["rank"].nunique()), 1))
