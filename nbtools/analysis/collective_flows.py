"""analysis: one collective joined across ranks, for flow arrows (timeline, Perfetto export).
Pure: the straggler matcher's pairs (the k-th collective of each step on every rank) with
the event each rank arrived with, who arrived last and how long each rank waited for it."""
from __future__ import annotations

import numpy as np
import pandas as pd

from nbtools.analysis.straggler import arrivals_by_rank

FLOW_COLUMNS = ["step", "k", "name", "rank", "lane", "ts_ns", "end_ns", "last_rank",
                "last_ts_ns", "last_lane", "wait_ns"]


def collective_flows(events: pd.DataFrame) -> pd.DataFrame:
    """One row per (matched collective, rank that is not the last to arrive): that rank's
    arrival (lane, ts_ns, end_ns), the last arrival (last_rank, last_ts_ns, last_lane) and
    wait_ns (the last arrival minus its own, at most its collective's length; as in
    straggler.attribute). Only collectives matched on every rank, as the straggler verdict
    uses; empty when fewer than two ranks have collectives."""
    empty = pd.DataFrame({c: [] for c in FLOW_COLUMNS})
    got = arrivals_by_rank(events)
    if got is None:
        return empty
    ev, per = got
    ranks = sorted(per)
    frames = []
    for r, a in per.items():
        mine = ev[ev["rank"] == r]
        comm = mine[mine["category"] == "communication"]
        lane = pd.Series(comm["lane"].astype(str).to_numpy(),
                         index=comm["ts_ns"].to_numpy(np.int64))
        lane = lane[~lane.index.duplicated()]
        frames.append(pd.DataFrame({
            "step": a.index.get_level_values(0).to_numpy(np.int64),
            "k": a.index.get_level_values(1).to_numpy(np.int64), "rank": r,
            "name": a["name"].astype(str).to_numpy(object),
            "ts_ns": a["ts_ns"].to_numpy(np.int64), "end_ns": a["end_ns"].to_numpy(np.int64),
            "lane": lane.reindex(a["ts_ns"].to_numpy(np.int64)).fillna("").to_numpy(object)}))
    allr = pd.concat(frames, ignore_index=True)
    # matched on every rank, as the straggler verdict uses
    full = allr.groupby(["step", "k"])["rank"].transform("nunique") == len(ranks)
    allr = allr[full]
    if not len(allr):
        return empty
    # the last arrival of each collective (ties: the higher rank, as max over (ts, rank))
    order = allr.sort_values(["step", "k", "ts_ns", "rank"], kind="stable")
    last = order.groupby(["step", "k"]).tail(1)[["step", "k", "rank", "ts_ns", "lane"]]
    last.columns = ["step", "k", "last_rank", "last_ts_ns", "last_lane"]
    out = allr.merge(last, on=["step", "k"])
    out = out[out["rank"] != out["last_rank"]].sort_values(["step", "k", "rank"], kind="stable")
    wait = np.clip(out["last_ts_ns"].to_numpy(np.int64) - out["ts_ns"].to_numpy(np.int64), 0,
                   out["end_ns"].to_numpy(np.int64) - out["ts_ns"].to_numpy(np.int64))
    return out.assign(wait_ns=wait)[FLOW_COLUMNS].reset_index(drop=True)
