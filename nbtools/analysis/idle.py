"""Why the GPU waits: each gap in a rank's GPU work split into host wait, kernel wait and
other, as HolisticTraceAnalysis defines them, and for host wait, where the host's time went
meanwhile. Pure: the events table in, tables out.

The three kinds (HTA's ``get_idle_time_breakdown``), judged by the kernel that ends a gap:

- host wait: that kernel's launch call started after the GPU went idle. The host had not
  asked for the next kernel yet: the host is the bottleneck (Python, hooks, the optimizer,
  a sync), and only a shorter host part helps.
- kernel wait: it was launched before, and the gap is shorter than ``KERNEL_WAIT_US``
  (HTA's consecutive_kernel_delay, 30 us): the cost of starting kernels back to back.
- other: launched before, and the GPU still waited longer: a cross-stream event, a
  collective's peer, a sync the device itself waits on.

``stream_idle`` is HTA's table itself (per rank and stream, over the whole trace);
``step_waits`` is what the summary shows: the same rule over the gaps of the rank's GPU as a
whole (no kernel, copy or memset on any stream) inside each profiled step, so the three add
up to the step's ``idle_ms``. A host-wait gap is then charged to what the launching thread
was inside during it (``HOST_CAUSES``, first match by priority: a sync inside the optimizer
is a sync), so the causes add up to ``host_wait_ms``.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from nbtools.analysis.keyed import pair_codes
from nbtools.analysis.step_metrics import event_columns, launchers, step_range_rows
from nbtools.schema.tables import string_codes

KERNEL_WAIT_US = 30
"""HTA's default consecutive_kernel_delay: a shorter gap after an already-launched kernel is
the cost of launching back to back (kernel wait), a longer one is other."""

WAITS = ("host_wait_ms", "kernel_wait_ms", "other_wait_ms")

# What the launching thread was inside during a host-wait gap. The first whose ranges cover
# an instant takes it: a compile holds everything it calls (its autotuning syncs and
# launches too), then the call that blocks or launches is the most specific, then the
# named subsystems, then the phases of our own step (ranges engine/apply.py opens), then
# "other" (nothing named: the person's Python between ops).
_CAUSES = (
    # a compile inside the step (a recompile on a new shape, or a warm-up too short):
    # Dynamo's and the backend's timed phases, whatever they call meanwhile
    ("compiling", r" \(dynamo_timed\)$|^entire_frame_compile$|^_compile\.compile_inner$"),
    ("sync", r"^(cuda|hip|cu)(Device|Stream|Event|Ctx)Synchronize|^(cuda|hip|cu)Memcpy(?!Async)"
             r"|^aten::(item|_local_scalar_dense)$"),
    ("launch", None),               # every other CUDA runtime/driver call (category runtime)
    ("hooks", r"^FSDP::|^fsdp::|RegisterPostBackwardFunction|^DDP::|^c10d::|"
              r"^_?c10d_functional::|^record_param_comms|^(nccl|gloo|rccl):"),
    ("optimizer", r"^Optimizer\.(step|zero_grad)#|^optimizer$"),
    ("compiled", r"^Torch-Compiled Region|^CompiledFunction|^TorchDynamo Cache Lookup|"
                 r"_inductor_wrapper_call$|^## Call CompiledFxGraph"),
    ("autograd", r"^autograd::engine::evaluate_function|^backward$"),
    ("batch", r"^enumerate\(DataLoader\)|^batch$"),
    ("forward", r"^forward$|^loss$|^## forward ##"),
)
HOST_CAUSES = tuple(c for c, _ in _CAUSES) + ("other",)
HOST_COLUMNS = tuple(f"host_{c}_ms" for c in HOST_CAUSES)
CAUSE_WORDS = {"compiling": "compiling (Dynamo and the backend: a recompile in the step)",
               "sync": "host syncs (.item(), .cpu(), synchronize)",
               "launch": "kernel launch calls",
               "hooks": "FSDP/DDP hooks and collectives' host side",
               "optimizer": "the optimizer step",
               "compiled": "calls into compiled graphs (guards, wrappers)",
               "autograd": "autograd's backward (host side)",
               "batch": "making the batch",
               "forward": "the model's forward Python",
               "other": "other host work (nothing named)"}
_PATTERNS = tuple(re.compile(p) if p else None for _, p in _CAUSES)


def cause_codes(names, categories) -> np.ndarray:
    """Index into HOST_CAUSES (-1: none) of each distinct (name, category) of CPU events."""
    out = np.full(len(names), -1, np.int64)
    for i, (name, cat) in enumerate(zip(names, categories)):
        for k, pat in enumerate(_PATTERNS):
            if (cat == "runtime") if pat is None else pat.search(str(name)) is not None:
                out[i] = k
                break
    return out


def stream_idle(events: pd.DataFrame, kernel_wait_us: float = KERNEL_WAIT_US) -> pd.DataFrame:
    """HTA's idle time breakdown: rank, lane (a ``cuda:`` stream), idle_category (host_wait,
    kernel_wait, other), idle_ms, over the whole trace. Each kernel, copy or memset on a
    stream after the first is preceded by ``ts - previous end`` of idle, judged by that
    event's launch (HTA ``_analyze_idle_time_for_stream``)."""
    cols = ["rank", "lane", "idle_category", "idle_ms"]
    c = event_columns(events) if len(events) else None
    if c is None:
        return pd.DataFrame(columns=cols)
    rows = np.flatnonzero(c["gpu"] & c["busy"])
    if not len(rows):
        return pd.DataFrame(columns=cols)
    rows = rows[np.lexsort((c["ts"][rows], c["lane_code"][rows], c["rank"][rows]))]
    key = c["rank"][rows] * (c["lane_code"].max() + 1) + c["lane_code"][rows]
    prev_end = np.r_[np.int64(0), c["end"][rows][:-1]]
    follows = np.r_[False, key[1:] == key[:-1]]
    gap = c["ts"][rows] - prev_end
    launch = _launch_ts(c, launchers(c, rows))
    kind = np.where(launch > prev_end, 0, np.where(gap < kernel_wait_us * 1e3, 1, 2))
    r, lane = c["rank"][rows][follows], c["lane_code"][rows][follows]
    df = pd.DataFrame({"rank": r, "lane_code": lane, "kind": kind[follows],
                       "ns": gap[follows].astype(float)})
    g = df.groupby(["rank", "lane_code", "kind"])["ns"].sum().unstack(fill_value=0.0)
    g = g.reindex(columns=[0, 1, 2], fill_value=0.0).stack().reset_index(name="ns")
    lanes = events["lane"].astype("category").cat.categories
    return pd.DataFrame({"rank": g["rank"].to_numpy(), "lane": np.asarray(lanes)[g["lane_code"]],
                         "idle_category": np.array(["host_wait", "kernel_wait", "other"])[
                             g["kind"].to_numpy()],
                         "idle_ms": g["ns"].to_numpy() / 1e6})


def gaps(events: pd.DataFrame, *, _c: dict | None = None,
         kernel_wait_us: float = KERNEL_WAIT_US) -> pd.DataFrame:
    """Every gap in a rank's GPU work (nothing on any stream) inside a step: rank, step,
    ts_ns (where the GPU went idle), dur_ns, kind (host_wait | kernel_wait | other), by the
    kernel that ends it: its launch after the gap began is host wait. ``next`` is that
    kernel's name; ``thread`` the CPU lane that launched it; for host wait, ``host`` the
    HOST_CAUSES entry the launching thread spent most of the gap in and ``host_share`` that
    share of the gap ('' and NaN otherwise). Their sum per (rank, step) is the step's
    idle_ms. CPU-only ranks have none."""
    cols = ["rank", "step", "ts_ns", "dur_ns", "kind", "next", "thread", "host", "host_share"]
    c = event_columns(events) if _c is None and len(events) else _c
    if c is None:
        return pd.DataFrame(columns=cols)
    g = _gaps(c, events["step"].to_numpy(np.int64), kernel_wait_us)
    if g is None:
        return pd.DataFrame(columns=cols)
    at, start, dur, kind, launch_row = g
    lanes = np.asarray(events["lane"].astype("category").cat.categories)
    names = events["name"].to_numpy()
    # each host-wait gap its own group: what its launching thread was in, per cause
    h = np.flatnonzero(kind == 0)
    per = _host_causes(c, events, events["step"].to_numpy(np.int64), at[h], start[h], dur[h],
                       launch_row[h])
    host = np.full(len(at), "", object)
    share = np.full(len(at), np.nan)
    if len(h):
        top = per.argmax(axis=0)
        host[h] = np.asarray(HOST_CAUSES, object)[top]
        share[h] = per[top, np.arange(len(h))] / np.maximum(dur[h], 1)
    return pd.DataFrame({"rank": c["rank"][at], "step": events["step"].to_numpy()[at],
                         "ts_ns": start, "dur_ns": dur,
                         "kind": np.array(["host_wait", "kernel_wait", "other"])[kind],
                         "next": names[at],
                         "thread": np.where(launch_row >= 0,
                                            lanes[c["lane_code"][np.maximum(launch_row, 0)]],
                                            ""), "host": host, "host_share": share})


def step_waits(events: pd.DataFrame, *, _c: dict | None = None,
               kernel_wait_us: float = KERNEL_WAIT_US) -> pd.DataFrame:
    """One row per (rank, step) with GPU work: WAITS (ms; they add up to the step's idle_ms)
    and HOST_COLUMNS (ms; they add up to host_wait_ms): what the launching thread was inside
    during the host-wait gaps."""
    cols = ["rank", "step", *WAITS, *HOST_COLUMNS]
    c = event_columns(events) if _c is None and len(events) else _c
    if c is None:
        return pd.DataFrame(columns=cols)
    step = events["step"].to_numpy(np.int64)
    g = _gaps(c, step, kernel_wait_us)
    if g is None:
        return pd.DataFrame(columns=cols)
    at, start, dur, kind, launch_row = g
    codes, prank, pstep = pair_codes(c["rank"][at], step[at])
    n = len(prank)
    out = {"rank": prank, "step": pstep}
    for k, name in enumerate(WAITS):
        out[name] = np.bincount(codes[kind == k], weights=dur[kind == k], minlength=n) / 1e6
    h = kind == 0
    host = _host_causes(c, events, step, at[h], start[h], dur[h], launch_row[h])
    for k, name in enumerate(HOST_COLUMNS):
        out[name] = np.bincount(codes[h], weights=host[k], minlength=n) / 1e6
    df = pd.DataFrame(out)
    return df.sort_values(["rank", "step"], kind="stable").reset_index(drop=True)[cols]


def _launch_ts(c: dict, lr: np.ndarray) -> np.ndarray:
    """Start of each launching CPU row ``lr`` (int64 min where -1, none: never after
    anything, so never host wait, as HTA's NaN comparison)."""
    return np.where(lr >= 0, c["ts"][np.maximum(lr, 0)], np.iinfo(np.int64).min)


def _gaps(c: dict, step: np.ndarray, kernel_wait_us: float):
    """(row ending each gap, gap start, duration ns, kind 0/1/2, launching CPU row or -1),
    over GPU work grouped by (rank, step), as per_step groups it for idle_ms."""
    rows = np.flatnonzero(c["gpu"] & c["busy"] & (step >= 0) & c["gpu_rank"])
    if not len(rows):
        return None
    rows = rows[np.lexsort((c["ts"][rows], step[rows], c["rank"][rows]))]
    key = c["rank"][rows] * (int(step.max()) + 2) + step[rows]
    ends = c["end"][rows]
    # running max of ends within each (rank, step): the union's sweep, reset per group
    cover = pd.Series(ends).groupby(key).cummax().to_numpy()
    prev = np.r_[np.int64(0), cover[:-1]]
    same = np.r_[False, key[1:] == key[:-1]]
    gap = np.where(same, c["ts"][rows] - prev, 0)
    hit = np.flatnonzero(gap > 0)
    at = rows[hit]
    lr = launchers(c, at)
    launch = _launch_ts(c, lr)
    start, dur = prev[hit], gap[hit]
    kind = np.where(launch > start, 0, np.where(dur < kernel_wait_us * 1e3, 1, 2))
    return at, start, dur, kind, lr


def _host_causes(c, events, step, at, start, dur, launch_row) -> np.ndarray:
    """ns per (HOST_CAUSES index, gap) of host-wait gaps: each instant of a gap goes to the
    first cause whose ranges on the launching thread cover it, else other. A gap and the
    host's ranges meet by (thread, step): the gap's step is its kernels', a CPU range's is
    the host step it lies in, and a host-wait gap lies in its own step's host time (its
    kernel was not launched yet). One sweep over every gap and range: the gaps of one
    thread never overlap (they are times the rank's GPU was idle), so each instant of the
    sweep is in at most one gap."""
    k_all = len(HOST_CAUSES)
    out = np.zeros((k_all, len(at)))
    # a gap whose kernel has no launch row (a foreign trace without runtime events): other
    known = np.flatnonzero(launch_row >= 0)
    out[-1, launch_row < 0] = dur[launch_row < 0]
    if not len(known):
        return out
    lr = launch_row[known]
    lanes = int(c["lane_code"].max()) + 1
    span = int(step.max()) + 2
    gkey = (c["rank"][lr] * lanes + c["lane_code"][lr]) * span + step[at[known]]
    uk, ginv = np.unique(gkey, return_inverse=True)
    cpu = np.flatnonzero(~c["gpu"] & (step >= 0))
    rkey = (c["rank"][cpu] * lanes + c["lane_code"][cpu]) * span + step[cpu]
    pos = np.minimum(np.searchsorted(uk, rkey), len(uk) - 1)
    cpu, pos = cpu[uk[pos] == rkey], pos[uk[pos] == rkey]
    cause = _row_causes(events, cpu)
    first = np.full(len(uk), np.iinfo(np.int64).max)
    np.minimum.at(first, pos, c["ts"][cpu])          # each thread-step's first row
    cpu, pos, cause = cpu[cause >= 0], pos[cause >= 0], cause[cause >= 0]
    r_ts, r_end = c["ts"][cpu], c["end"][cpu]
    f_pos, f_ts, f_end = _forward_before_backward(pos, cause, r_ts, first)
    pos = np.concatenate([pos, f_pos])
    cause = np.concatenate([cause, np.full(len(f_pos), _FORWARD)])
    r_ts, r_end = np.concatenate([r_ts, f_ts]), np.concatenate([r_end, f_end])
    ng, nr = len(known), len(pos)
    gs, ge = start[known], start[known] + dur[known]
    t = np.concatenate([gs, r_ts, ge, r_end]).astype(np.int64)
    g = np.concatenate([ginv, pos, ginv, pos])
    lab = np.concatenate([np.zeros(ng, np.int64), cause + 1, np.zeros(ng, np.int64), cause + 1])
    d = np.concatenate([np.ones(ng + nr, np.int32), -np.ones(ng + nr, np.int32)])
    gap_no = np.concatenate([np.arange(ng), np.full(nr + ng + nr, -1)])
    order = np.lexsort((t, g))
    t, g, lab, d, gap_no = t[order], g[order], lab[order], d[order], gap_no[order]
    delta = np.zeros((len(t), k_all), np.int32)
    delta[np.arange(len(t)), lab] = d
    counts = np.cumsum(delta, axis=0)[:-1]
    # the gap each sweep position is in: the last gap start seen (sorted by group first)
    last = np.maximum.accumulate(np.where(gap_no >= 0, np.arange(len(t)), -1))[:-1]
    hold = (g[1:] == g[:-1]) & (counts[:, 0] > 0) & (last >= 0)
    named = counts[hold, 1:] > 0
    which = np.where(named.any(axis=1), named.argmax(axis=1), k_all - 1)
    np.add.at(out, (which, known[gap_no[last[hold]]]), (t[1:] - t[:-1])[hold])
    return out


CPU_WORDS = dict(CAUSE_WORDS, hooks="DDP/FSDP hooks and collectives (waits for peers included)",
                 compiled="compiled graphs (their code runs on the cores)",
                 autograd="autograd's backward", forward="the model's forward",
                 other="the rest (nothing named: your step's own Python and ops)")
"""The same causes read over a CPU rank's whole step, where they are the work itself."""


def cpu_step_split(events: pd.DataFrame) -> pd.DataFrame:
    """Where a CPU rank's profiled steps went: one row per (rank, step) of a rank without GPU
    work, the step range's ms (``step_ms``) split over HOST_COLUMNS by the same rule as a
    host-wait gap (each instant to the first cause whose ranges cover it on the step's own
    thread, else other), so they add up to ``step_ms``. Only ranks with step ranges
    (``nbtools/step N`` or ``ProfilerStep#N``)."""
    cols = ["rank", "step", "step_ms", *HOST_COLUMNS]
    if not len(events):
        return pd.DataFrame(columns=cols)
    c = event_columns(events)
    step = events["step"].to_numpy(np.int64)
    gpu_ranks = np.unique(c["rank"][c["gpu_rank"]])
    # the step's own row: its range on the thread that ran it (the sweep's "launcher")
    rows = step_range_rows(events)
    rows = rows[~np.isin(c["rank"][rows], gpu_ranks) & (step[rows] >= 0)]
    if not len(rows):
        return pd.DataFrame(columns=cols)
    start = c["ts"][rows].astype(np.int64)
    dur = c["dur"][rows].astype(np.int64)
    per = _host_causes(c, events, step, rows, start, dur, rows)
    out = {"rank": c["rank"][rows], "step": step[rows], "step_ms": dur / 1e6}
    for k, name in enumerate(HOST_COLUMNS):
        out[name] = per[k] / 1e6
    return pd.DataFrame(out).sort_values(["rank", "step"], kind="stable").reset_index(
        drop=True)[cols]


_FORWARD = HOST_CAUSES.index("forward")
_AUTOGRAD = HOST_CAUSES.index("autograd")


def _forward_before_backward(pos, cause, ts, first):
    """A trace without forward ranges (a person's own job: only nbtools opens them) still
    runs its forward before its backward: on each thread-step with a backward and no
    forward range, the time from the thread's first row to the backward is taken as the
    forward's (the named causes before it keep their own time: they come first). Returns
    (group, start, end) of those synthetic ranges."""
    n = len(first)
    has_fwd = np.zeros(n, bool)
    has_fwd[pos[cause == _FORWARD]] = True
    bw = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(bw, pos[cause == _AUTOGRAD], ts[cause == _AUTOGRAD])
    g = np.flatnonzero(~has_fwd & (bw < np.iinfo(np.int64).max) & (first < bw))
    return g, first[g], bw[g]


def _row_causes(events: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """HOST_CAUSES index (-1: none) of each CPU row, classified once per distinct (name,
    category)."""
    name_code, names = string_codes(events["name"])
    cat_code, cats = string_codes(events["category"])
    width = len(cats) + 1
    pcode, uniq = pd.factorize(name_code[rows].astype(np.int64) * width + cat_code[rows])
    return cause_codes(pd.Index(np.asarray(names)[uniq // width]),
                       np.asarray(cats)[uniq % width])[pcode]


def hta_selection(events: pd.DataFrame) -> pd.DataFrame:
    """The events HTA's TraceAnalysis keeps for its analyses: with two or more ProfilerStep
    ranges, GPU work only where the CPU call that launched it started before the last
    ProfilerStep (HTA drops the last, incomplete iteration and work launched outside the
    iterations); every CPU event stays. For comparing our numbers with HTA's."""
    if not len(events):
        return events
    names = events["name"].astype(str)
    gpu_lane = events["lane"].astype(str).str.startswith("cuda:")
    marks = events[names.str.match(r"ProfilerStep\s*#") & ~gpu_lane]
    if len(marks) < 2:
        return events
    c = event_columns(events)
    rows = np.flatnonzero(c["gpu"])
    lr = launchers(c, rows)
    ok = (lr >= 0) & (c["ts"][np.maximum(lr, 0)] < marks["ts_ns"].max())
    keep = np.ones(len(events), bool)
    keep[rows[~ok]] = False
    return events[keep]
