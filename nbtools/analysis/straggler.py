"""Which rank the others wait for in collectives, by how much, and why: from a run's events
(tables.EVENT_COLUMNS; all ranks' timestamps on one clock). Pure: no torch, no bokeh.

In a collective every rank finishes together, so a rank's step time includes its wait for
the last rank to arrive: the per-rank step times then point at the waiting rank, not at
the late one. Here the k-th collective of each rank in each step is matched across ranks:

- arrival: when the collective started running on the rank, the NCCL kernel on a GPU
  rank, the ``gloo:*`` work (gloo's own thread) on a CPU rank;
- wait: the last arrival minus the rank's own arrival (at most the collective's length);
- cause, for the last-arriving rank: between its previous collective and this one, did it
  compute longer than the others (``compute``: GPU kernels, or CPU ops on a CPU rank)? If
  its extra compute covers less than half its lateness, the device (or CPU) sat without
  work: the host launched late (``host``: Python, the data, a sleep, the launch path).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from nbtools.analysis.step_metrics import step_times
from nbtools.common.units import fmt_number

# A straggler is named when one rank arrives last this often, beyond chance (a balanced run
# on busy cores can put one rank last 5 times in 6 by luck), and the others wait for it at
# least this long per step (and this share of a step: less is in wait_ms and last_pct, not
# worth a flag; on busy shared cores a balanced run was seen with one rank 1.7 ms late in
# 12-ms steps). Per step, not per collective: on H200, tp-mlp-infer's rank 0 was 0.3 ms late
# to each of 8 all-reduces, and rank 1 waited 2.5 ms of its 3.5-ms step.
MIN_SHARE, MAX_CHANCE, MIN_LATE_MS, MIN_LATE_OF_STEP = 0.75, 0.01, 0.1, 0.2
# A lateness that repeats in every step, 3 times the others' worst, is no luck: named from
# this share of a step (2 x H200 batch 256: rank 0 waited 0.95 ms of a 7.5-ms step for rank 1)
MIN_LATE_OF_STEP_CONSISTENT = 0.1
JITTER_OF_DIFFERENCE = 2 ** 0.5
_KINDS = (("allreduce", "all-reduces"), ("all_reduce", "all-reduces"),
          ("allgather", "all-gathers"), ("all_gather", "all-gathers"),
          ("reducescatter", "reduce-scatters"), ("reduce_scatter", "reduce-scatters"),
          ("broadcast", "broadcasts"), ("alltoall", "all-to-alls"), ("all_to_all", "all-to-alls"),
          ("barrier", "barriers"), ("sendrecv", "sends/receives"), ("send", "sends/receives"),
          ("recv", "sends/receives"))
RANK_COLUMNS = ["rank", "wait_ms", "last_pct"]


def attribute(events: pd.DataFrame, steps_table: pd.DataFrame | None = None) -> dict | None:
    """-> {"per_rank": DataFrame(RANK_COLUMNS), "straggler": verdict or None,
    "collectives": matched count}, or None when the events hold no collective matched on
    every rank. The verdict: rank, late_ms (median over steps of how much later, summed over
    the step's collectives, it arrived than the next-latest rank), share (how often it was last),
    chance (how likely that share is by luck),
    cause (``host`` | ``compute`` | ``unknown``), extra_compute_ms (median), kind ("all-reduces"),
    waits {rank: median ms per step spent waiting}. ``steps_table`` (the run's steps: every
    measured step of every rank) gives the steps' noise more samples than the few profiled
    steps hold."""
    got = arrivals_by_rank(events)
    if got is None:
        return None
    ev, per = got
    ranks = sorted(per)
    keys = set.intersection(*(set(a.index) for a in per.values()))
    if not keys:
        return None
    keys = sorted(keys)
    start = np.array([[per[r].at[k, "ts_ns"] for r in ranks] for k in keys], np.float64)
    end = np.array([[per[r].at[k, "end_ns"] for r in ranks] for k in keys], np.float64)
    busy = np.array([[per[r].at[k, "busy_before_ns"] for r in ranks] for k in keys])
    last = start.argmax(axis=1)
    srt = np.sort(start, axis=1)
    late = srt[:, -1] - srt[:, -2]
    wait = np.clip(srt[:, -1:] - start, 0, end - start)
    steps = np.array([k[0] for k in keys])
    wait_step = pd.DataFrame(wait, columns=ranks).groupby(steps).sum().median()
    last_pct = [100.0 * float(np.mean((last == i) & (late > 0))) for i in range(len(ranks))]
    table = pd.DataFrame({"rank": np.array(ranks, np.int32),
                          "wait_ms": wait_step.to_numpy() / 1e6, "last_pct": last_pct})
    out = {"per_rank": table, "straggler": None, "collectives": len(keys)}
    # Who the others wait for, weighted by how long: a rank last by microseconds at most
    # collectives is not the straggler when another is a millisecond late at one per step
    # (2 x H200, tp-mlp-infer batch 256: rank 1 reached each step's first all-reduce ~1 ms
    # late, rank 0 was last by 2-4 us at the other seven).
    caused = np.zeros_like(start)
    caused[np.arange(len(keys)), last] = late
    per_step = pd.DataFrame(caused, columns=ranks).groupby(steps).sum()
    cand = int(np.argmax(per_step.sum().to_numpy()))
    mine = per_step.iloc[:, cand].to_numpy()
    rest = per_step.drop(columns=ranks[cand]).to_numpy().max(axis=1)
    step_share = float(np.mean(mine > rest))
    lastc = last == cand
    share = float(np.mean(lastc))
    chance = _chance(int(np.sum(lastc)), len(keys), len(ranks))
    late_ms = float(np.median(mine)) / 1e6
    step_ms = _median_step_ms(events)
    waited = float(wait_step.drop(ranks[cand]).max()) / 1e6
    # Beyond chance either way: last at most collectives (balanced runs on busy cores put
    # one rank last 5 times in 6 by luck), or the main cause of waiting in every step with
    # at least 3 times the others' worst step (a lateness that repeats step after step)
    consistent = step_share == 1.0 and len(mine) >= 2 and mine.min() > 3 * rest.max()
    # Evidence: late in most profiled steps by more than the steps' own noise: how much the
    # other ranks' steps scatter once their wait for the candidate is taken out (their own
    # work: scheduling jitter, not the candidate's lateness, which a noise taken over whole
    # steps would count against itself). On two busy CPU cores identical runs put rank 0
    # last in one run and rank 1 in the next by less than that noise: luck, not a straggler.
    # Lateness is one rank's arrival against another's, and each jitters by the noise on its
    # own: their difference by sqrt(2) times it. The noise: the larger of the other ranks'
    # over the profiled steps (above) and the candidate's over every timed step (10+ against
    # 3 profiled; it waits for nobody, so its step times are its own: on two busy CPU cores
    # 3 profiled steps gave 2.1 ms where its 13 timed steps spread 3.8 ms, and a rank 4 ms
    # "late" was named in one run of identical ones).
    waits_by_step = pd.DataFrame(wait, columns=ranks).groupby(steps).sum()
    noise = max(_step_noise_ns(events, waits_by_step.drop(columns=ranks[cand])),
                _timed_noise_ns(steps_table, ranks[cand]))
    late_steps = float(np.mean(mine > np.maximum(rest, JITTER_OF_DIFFERENCE * noise)))
    out["evidence"] = dict(rank=ranks[cand], late_steps=late_steps, steps=len(mine),
                           noise_ms=JITTER_OF_DIFFERENCE * noise / 1e6,
                           late_ms=float(np.median(mine)) / 1e6)
    if late_steps <= 0.5:
        return out
    # One profiled step cannot tell a lateness that repeats from a one-off (notebook 06 on
    # 2 x H200 with profiled=1: rank 1 entered its only profiled step 221 ms late, longer
    # than the 192-ms unprofiled step): a verdict needs two steps or more.
    if len(mine) < 2 or \
            not ((share >= MIN_SHARE and chance <= MAX_CHANCE) or consistent) or late_ms <= 0 or \
            waited < max(MIN_LATE_MS, step_ms * (MIN_LATE_OF_STEP_CONSISTENT if consistent
                                                 else MIN_LATE_OF_STEP)):
        return out
    # extra compute of the late rank before the collectives it was late to, against the
    # median of the rest
    ok = ~np.isnan(busy).any(axis=1) & lastc & (late > 0)
    extra = busy[ok, cand] - np.median(np.delete(busy[ok], cand, axis=1), axis=1)
    extra_ms = float(np.median(extra)) / 1e6 if ok.any() else float("nan")
    late_each = float(np.median(late[lastc & (late > 0)])) / 1e6
    cause = "unknown" if not ok.any() else "compute" if extra_ms >= 0.5 * late_each else "host"
    names = per[ranks[cand]]["name"]
    out["straggler"] = dict(
        rank=ranks[cand], late_ms=late_ms, share=share, step_share=step_share, chance=chance,
        step_ms=step_ms,
        cause=cause, extra_compute_ms=extra_ms,
        kind=_kind(names),
        waits={r: float(w) / 1e6 for r, w in wait_step.items() if r != ranks[cand]})
    return out


def verdict_text(att: dict | None) -> str:
    """The straggler verdict in words: the named rank's sentence, or "no straggler resolved"
    with the evidence that fell short."""
    if att is None:
        return "no straggler resolved: no collective was matched on every rank"
    if att.get("straggler"):
        return sentence(att["straggler"])
    ev = att.get("evidence")
    if not ev:
        return "no straggler resolved"
    return (f"no straggler resolved: the likeliest, rank {ev['rank']}, was late by more than "
            f"the steps' noise ({fmt_number(ev['noise_ms'])} ms) in {ev['late_steps']:.0%} of "
            f"{ev['steps']} profiled steps (median {fmt_number(ev['late_ms'])} ms)"
            + ("" if ev["late_steps"] <= 0.5 else "; not often or long enough beyond chance"))


def sentence(verdict: dict) -> str:
    """The verdict as a flag's words (flags.py wraps it)."""
    r, late, kind = verdict["rank"], verdict["late_ms"], verdict["kind"]
    waits = "; ".join(f"rank {w} waited {fmt_number(ms)} ms per step"
                      for w, ms in verdict["waits"].items())
    if verdict["cause"] == "host":
        extra = round(verdict["extra_compute_ms"], 2) + 0.0   # + 0.0: no "-0.00"
        return (f"rank {r} launched the {kind} late, {fmt_number(late)} ms per step on median: "
                f"host-side (not slower compute: {extra:+.2f} ms of compute before them against "
                f"the others); {waits}")
    if verdict["cause"] == "unknown":
        return (f"rank {r} reached the {kind} late, {fmt_number(late)} ms per step on median "
                f"(host-side or compute not told: no step range before them was captured); "
                f"{waits}")
    return (f"rank {r} reached the {kind} late, {fmt_number(late)} ms per step on median: "
            f"slower compute ({fmt_number(verdict['extra_compute_ms'])} ms more before them "
            f"than the others); {waits}")


def arrivals_by_rank(events: pd.DataFrame):
    """(the events inside steps, {rank: its collectives' arrivals (_arrivals)}), or None
    when fewer than two ranks, or a rank with no collective: what the straggler verdict and
    the flows between ranks (collective_flows) both match on."""
    if events is None or not len(events):
        return None
    ev = events[events["step"] >= 0]
    ranks = sorted(int(r) for r in ev["rank"].unique())
    if len(ranks) < 2:
        return None
    per = {r: _arrivals(ev[ev["rank"] == r]) for r in ranks}
    if any(a is None for a in per.values()):
        return None
    return ev, per


def _arrivals(ev: pd.DataFrame) -> pd.DataFrame | None:
    """One rank's collectives indexed by (step, k-th in step): ts_ns, end_ns, name, and
    busy_before_ns (compute since its previous collective ended, or its step began)."""
    comm = ev[ev["category"] == "communication"]
    gpu = comm["lane"].str.startswith("cuda:")
    if gpu.any():
        coll = comm[gpu]
        work = ev[(ev["category"] == "compute") & ev["lane"].str.startswith("cuda:")]
    else:
        gloo = comm["name"].str.startswith("gloo:")
        coll = comm[gloo] if gloo.any() else _outermost(comm)
        work = ev[(ev["category"] == "cpu_op") & ev["lane"].str.startswith("cpu:")]
    if not len(coll):
        return None
    coll = coll.sort_values("ts_ns", kind="stable")
    ts = coll["ts_ns"].to_numpy(np.int64)
    end = ts + coll["dur_ns"].to_numpy(np.int64)
    step = coll["step"].to_numpy()
    # compute counted since the previous collective ended; before the first one, since its
    # step began (the step ranges are the rank's own: no clock is compared across ranks)
    prev_end = np.concatenate([[np.nan], end[:-1].astype(np.float64)])
    if len(step):
        st = step_times(ev, spans=False).set_index("step")["ts_ns"]
        prev_end[0] = float(st.get(step[0], np.nan))
    busy = _busy_between(work, prev_end, ts)
    k = pd.Series(step).groupby(step).cumcount().to_numpy()
    return pd.DataFrame({"ts_ns": ts, "end_ns": end, "name": coll["name"].to_numpy(),
                         "busy_before_ns": busy},
                        index=pd.MultiIndex.from_arrays([step, k]))


def _outermost(ev: pd.DataFrame) -> pd.DataFrame:
    """Events not nested in an earlier one on the same lane (c10d::allreduce_ holds its
    record_param_comms)."""
    keep = []
    for _, g in ev.sort_values(["lane", "ts_ns"]).groupby("lane", sort=False):
        reach = -1
        for i, t, d in zip(g.index, g["ts_ns"], g["dur_ns"]):
            if t >= reach:
                keep.append(i)
            reach = max(reach, t + d)
    return ev.loc[keep]


def _busy_between(work: pd.DataFrame, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Length of the union of ``work``'s intervals inside [a_i, b_i) for each i."""
    if not len(work):
        return np.where(np.isnan(a), np.nan, 0.0)
    s0 = work["ts_ns"].to_numpy(np.int64)
    order = np.argsort(s0, kind="stable")
    s, e = s0[order], (s0 + work["dur_ns"].to_numpy(np.int64))[order]
    reach = np.maximum.accumulate(e)           # merged into disjoint, sorted intervals
    first = np.concatenate([[True], s[1:] > reach[:-1]])
    ms = s[first].astype(np.float64)
    me = np.maximum.reduceat(e, np.flatnonzero(first)).astype(np.float64)
    cum = np.concatenate([[0.0], np.cumsum(me - ms)])

    def covered(t):   # busy time before t
        i = np.searchsorted(ms, t, side="right")
        j = np.maximum(i - 1, 0)    # the merged interval starting at or before t
        full = cum[j]
        part = np.where(i > 0, np.minimum(t, me[j]) - ms[j], 0)
        return np.where(i > 0, full + part, 0.0)
    bb = b.astype(np.float64)
    out = covered(bb) - covered(np.where(np.isnan(a), bb, a))
    return np.where(np.isnan(a), np.nan, out)


def _chance(k: int, n: int, ranks: int) -> float:
    """Probability that some rank is last at least k times in n by chance (each rank last
    with probability 1/ranks; union bound over the ranks)."""
    from math import comb
    p = 1.0 / ranks
    return min(1.0, ranks * sum(comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1)))


def _step_noise_ns(events: pd.DataFrame, waits: pd.DataFrame) -> float:
    """The profiled steps' own noise: for each rank in ``waits`` (columns: ranks, index:
    steps, ns waited in collectives), 1.4826 x the median absolute deviation over steps of its
    step time less its wait (a standard deviation one slow step cannot inflate); the largest."""
    st = step_times(events, spans=False)
    out = 0.0
    for r in waits.columns:
        mine = st[st["rank"] == r].set_index("step")["dur_ns"]
        own = (mine - waits[r].reindex(mine.index).fillna(0)).to_numpy(np.float64)
        if len(own):
            out = max(out, 1.4826 * float(np.median(np.abs(own - np.median(own)))))
    return out


def _timed_noise_ns(steps_table: pd.DataFrame | None, rank) -> float:
    """One rank's noise over every timed step (a run's steps table: measured and profiled
    steps): 1.4826 x the median absolute deviation of its step times. 0 without them."""
    if steps_table is None or not len(steps_table) or "phase" not in steps_table:
        return 0.0
    timed = steps_table[steps_table["phase"].isin(["measured", "profiled"])
                        & (steps_table["rank"] == rank)]
    d = timed["dur_ns"].to_numpy(np.float64)
    if len(d) < 3:
        return 0.0
    return 1.4826 * float(np.median(np.abs(d - np.median(d))))


def _median_step_ms(events: pd.DataFrame) -> float:
    st = step_times(events, spans=False)
    return float(st["step_ms"].median()) if len(st) else 0.0


def _kind(names: pd.Series) -> str:
    found = set()
    for n in names.str.lower():
        flat = n.replace("-", "")
        found.add(next((w for key, w in _KINDS if key in flat), "collectives"))
    return found.pop() if len(found) == 1 else "collectives"
