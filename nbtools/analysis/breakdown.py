"""Parts of a profiled step inside their whole: per rank, the step breakdown (compute,
communication, exposed communication, idle) and the step window it is a breakdown of, and
time per event category counted once per lane. Pure: no torch, no bokeh.

Why per step, then the mean: each part is measured inside one profiled step (the step's own
events; GPU work belongs to the step whose CPU call launched it), where compute + exposed
communication + idle fit inside the step's window by construction (all three are disjoint
parts of the step's busy span). Means add up, so the per-rank means keep the inequality;
medians of parts would not. The window is the step range widened to the end of the step's
own GPU work (a GPU that lags the host finishes the step after the CPU range closes), so it
is the whole the parts are shares of, and it is shown beside them (``profiled_window_ms``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from nbtools.analysis import idle
from nbtools.analysis.keyed import lookup, pair_codes
from nbtools.analysis.step_metrics import event_columns, per_rank, per_step, step_times

PARTS = ("compute_ms", "comm_ms", "memcpy_ms", "exposed_comm_ms", "idle_ms", "syncs")
"""Per profiled step and rank: means over the rank's profiled steps."""
WAIT_PARTS = idle.WAITS + idle.HOST_COLUMNS
"""idle_ms split by why the GPU waited, and host_wait_ms by where the host was (GPU ranks;
analysis/idle.py): per profiled step, means like PARTS, so they add up like them."""


def step_windows(events: pd.DataFrame, *, _spans: pd.DataFrame | None = None) -> pd.DataFrame:
    """rank, step, window_ms: each step's range widened to cover the step's own events.
    ``_spans``: ``step_times(events)`` when the caller has it."""
    cols = ["rank", "step", "window_ms"]
    step = events["step"].to_numpy()
    keep = step >= 0
    if not keep.any():
        return pd.DataFrame(columns=cols)
    # each (rank, step)'s first start and last end in numpy: a groupby of the filtered
    # frame copied every column (0.012 s of a 40k-event trace's load); same table
    rank, step = events["rank"].to_numpy()[keep], step[keep]
    ts = events["ts_ns"].to_numpy(np.int64)[keep]
    end = ts + events["dur_ns"].to_numpy(np.int64)[keep]
    codes, prank, pstep = pair_codes(rank, step)
    lo = np.full(len(prank), np.iinfo(np.int64).max)
    hi = np.full(len(prank), np.iinfo(np.int64).min)
    np.minimum.at(lo, codes, ts)
    np.maximum.at(hi, codes, end)
    by = np.lexsort((pstep, prank))
    rng = step_times(events) if _spans is None else _spans
    at = lookup(prank[by], pstep[by], rng["rank"].to_numpy(), rng["step"].to_numpy())
    if at is None:   # a (rank, step) range twice: the join's rows, as before
        return _join_windows(prank[by], pstep[by], lo[by], hi[by], rng)
    # the step range's ends looked up in numpy, not joined (a join is ~1 ms whatever the size)
    r_lo = rng["ts_ns"].to_numpy(np.int64)[at].astype(float)
    r_hi = (rng["ts_ns"].to_numpy(np.int64) + rng["dur_ns"].to_numpy(np.int64))[at].astype(float)
    lo = np.fmin(lo[by].astype(float), np.where(at >= 0, r_lo, np.nan))
    hi = np.fmax(hi[by].astype(float), np.where(at >= 0, r_hi, np.nan))
    return pd.DataFrame({"rank": prank[by], "step": pstep[by], "window_ms": (hi - lo) / 1e6})


def _join_windows(rank, step, lo, hi, rng: pd.DataFrame) -> pd.DataFrame:
    own = pd.DataFrame({"lo": lo, "hi": hi}, index=pd.MultiIndex.from_arrays(
        [rank, step], names=["rank", "step"]))
    rng = rng.set_index(["rank", "step"])
    rng = rng.assign(end=rng["ts_ns"] + rng["dur_ns"])
    both = own.join(rng[["ts_ns", "end"]], how="left")
    lo = np.fmin(both["lo"].to_numpy(float), both["ts_ns"].to_numpy(float))
    hi = np.fmax(both["hi"].to_numpy(float), both["end"].to_numpy(float))
    out = both.reset_index()[["rank", "step"]]
    out["window_ms"] = (hi - lo) / 1e6
    return out


def breakdown(events: pd.DataFrame, steps: pd.DataFrame, *, _c: dict | None = None,
              _spans: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per rank: PARTS as means over its profiled steps, and profiled_window_ms (the
    mean step window those parts fit in). A rank whose events carry no step numbers (a
    foreign trace without step ranges) gets its totals over the whole trace divided by its
    profiled steps (1 when unknown), and its event span so divided as the window."""
    cols = ["rank", *PARTS, *WAIT_PARTS, "profiled_window_ms"]
    if not len(events):
        return pd.DataFrame(columns=cols)
    ps = _with_waits(per_step(events, _c=_c, _spans=_spans), events, _c)
    win = step_windows(events, _spans=_spans)
    if all(np.array_equal(ps[k].to_numpy(), win[k].to_numpy()) for k in ("rank", "step")):
        # the same (rank, step) rows in the same order (both sorted): the inner merge is
        # the rows as they are (a merge is ~1 ms whatever the size)
        stepped = pd.DataFrame({**{k: ps[k].to_numpy() for k in ("rank", *PARTS, *WAIT_PARTS)},
                                "window_ms": win["window_ms"].to_numpy()})
    else:
        stepped = ps.merge(win, on=["rank", "step"], how="inner")
    means = stepped.groupby("rank")[[*PARTS, *WAIT_PARTS, "window_ms"]].mean()
    means = pd.DataFrame({"rank": means.index.to_numpy(), **{p: means[p].to_numpy() for p in
                          (*PARTS, *WAIT_PARTS)},
                          "profiled_window_ms": means["window_ms"].to_numpy()})
    # the distinct ranks in numpy: set() of the column iterated every event in Python
    rest = np.setdiff1d(np.unique(events["rank"].to_numpy()).astype(int),
                        means["rank"].to_numpy().astype(int)).tolist()
    if rest:
        ev = events[events["rank"].isin(rest)]
        pr = per_rank(ev)
        n_prof = steps[steps["phase"] == "profiled"].groupby("rank").size() if len(steps) \
            else pd.Series(dtype=int)
        n = pr["rank"].map(n_prof).fillna(1).clip(lower=1).to_numpy()
        end = ev["ts_ns"] + ev["dur_ns"]
        span = end.groupby(ev["rank"]).max() - ev["ts_ns"].groupby(ev["rank"]).min()
        # the whole trace as one step of each such rank, divided like the parts
        w = idle.step_waits(ev.assign(step=np.int32(0))).set_index("rank")
        fill = pd.DataFrame({"rank": pr["rank"], **{p: pr[p] / n for p in PARTS},
                             **{p: pr["rank"].map(w[p]).to_numpy() / n if p in w else np.nan
                                for p in WAIT_PARTS},
                             "profiled_window_ms": pr["rank"].map(span).to_numpy() / 1e6 / n})
        means = pd.concat([means, fill], ignore_index=True) if len(means) else fill
        return means[cols].sort_values("rank").reset_index(drop=True)
    return means   # sorted by rank already (groupby's keys)


def _with_waits(ps: pd.DataFrame, events: pd.DataFrame, c) -> pd.DataFrame:
    """per_step's rows with the step's WAIT_PARTS beside them (NaN on CPU ranks, which have
    no GPU to wait)."""
    w = idle.step_waits(events, _c=c)
    at = lookup(ps["rank"].to_numpy(), ps["step"].to_numpy(), w["rank"].to_numpy(),
                w["step"].to_numpy()) if len(ps) else np.zeros(0, np.int64)
    gpu = (ps["device"] == "gpu").to_numpy() if "device" in ps else np.zeros(len(ps), bool)
    out = {p: np.where(at >= 0, w[p].to_numpy(float)[np.maximum(at, 0)] if len(w) else 0.0,
                       np.where(gpu, 0.0, np.nan)) for p in WAIT_PARTS}
    return ps.assign(**out)


def violations(summary: pd.DataFrame, tol_ms: float = 1e-6) -> list[str]:
    """Where a summary's parts exceed their whole, as sentences (empty: every part fits).
    Checked per rank: exposed_comm_ms <= comm_ms and compute_ms + exposed_comm_ms + idle_ms
    <= profiled_window_ms."""
    out = []
    for _, r in summary.iterrows():
        g = {k: float(r.get(k, np.nan)) for k in ("comm_ms", "exposed_comm_ms", "compute_ms",
                                                   "idle_ms", "profiled_window_ms")}
        if g["exposed_comm_ms"] > g["comm_ms"] + tol_ms:
            out.append(f"rank {r['rank']}: exposed_comm_ms {g['exposed_comm_ms']:.6g} > "
                       f"comm_ms {g['comm_ms']:.6g}")
        parts = g["compute_ms"] + g["exposed_comm_ms"] + g["idle_ms"]
        if parts > g["profiled_window_ms"] + tol_ms:
            out.append(f"rank {r['rank']}: compute + exposed + idle {parts:.6g} ms > "
                       f"profiled_window_ms {g['profiled_window_ms']:.6g}")
    return out


def rank_table(events: pd.DataFrame, steps: pd.DataFrame, *,
               _ranges: pd.DataFrame | None = None) -> pd.DataFrame:
    """per_rank's columns with the step's parts (PARTS) replaced by their per-step means and
    the window they fit in: what every summary shows (a run's, loaded traces').
    ``_ranges``: ``step_times(events, spans=False)`` when the caller has it."""
    if not len(events):
        pr = per_rank(events).drop(columns=list(PARTS))
        return pr.merge(breakdown(events, steps), on="rank", how="left")
    # the per-row columns and the step ranges once, not once per part (8 ms of a 40k-event
    # trace's load)
    ranges = step_times(events, spans=False) if _ranges is None else _ranges
    c, spans = event_columns(events), step_times(events, _ranges=ranges)
    pr = per_rank(events, _c=c, _ranges=ranges)
    bd = breakdown(events, steps, _c=c, _spans=spans)
    if np.array_equal(pr["rank"].to_numpy(), bd["rank"].to_numpy()):
        # one row per rank on both sides, both sorted: the left merge is the columns side
        # by side (a drop and a merge are ~1 ms each whatever the size)
        return pd.DataFrame({**{k: pr[k].array for k in pr.columns if k not in PARTS},
                             **{k: bd[k].array for k in bd.columns if k != "rank"}})
    return pr.drop(columns=list(PARTS)).merge(bd, on="rank", how="left")
