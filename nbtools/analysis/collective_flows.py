"""analysis: one collective joined across ranks, for flow arrows (timeline, Perfetto export).
Pure: the straggler matcher's pairs (the k-th collective of each step on every rank) with
the event each rank arrived with, who arrived last and how long each rank waited for it."""
from __future__ import annotations

import numpy as np
import pandas as pd

from nbtools.analysis.straggler import _arrivals

FLOW_COLUMNS = ["step", "k", "name", "rank", "lane", "ts_ns", "end_ns", "last_rank",
                "last_ts_ns", "last_lane", "wait_ns"]


def collective_flows(events: pd.DataFrame) -> pd.DataFrame:
    """One row per (matched collective, rank that is not the last to arrive): that rank's
    arrival (lane, ts_ns, end_ns), the last arrival (last_rank, last_ts_ns, last_lane) and
    wait_ns (the last arrival minus its own, at most its collective's length; as in
    straggler.attribute). Only collectives matched on every rank, as the straggler verdict
    uses; empty when fewer than two ranks have collectives."""
    empty = pd.DataFrame({c: [] for c in FLOW_COLUMNS})
    if events is None or not len(events):
        return empty
    ev = events[events["step"] >= 0]
    ranks = sorted(int(r) for r in ev["rank"].unique())
    if len(ranks) < 2:
        return empty
    per = {}
    for r in ranks:
        mine = ev[ev["rank"] == r]
        a = _arrivals(mine)
        if a is None:
            return empty
        comm = mine[mine["category"] == "communication"]
        lane = dict(zip(comm["ts_ns"].to_numpy(np.int64).tolist(), comm["lane"].astype(str)))
        per[r] = a.assign(lane=[lane.get(int(t), "") for t in a["ts_ns"]])
    keys = sorted(set.intersection(*(set(a.index) for a in per.values())))
    rows = []
    for step, k in keys:
        arr = {r: per[r].loc[(step, k)] for r in ranks}
        last = max(ranks, key=lambda r: (int(arr[r]["ts_ns"]), r))
        lt = int(arr[last]["ts_ns"])
        for r in ranks:
            if r == last:
                continue
            a = arr[r]
            ts, end = int(a["ts_ns"]), int(a["end_ns"])
            rows.append((int(step), int(k), str(a["name"]), r, a["lane"], ts, end, last, lt,
                         arr[last]["lane"], int(np.clip(lt - ts, 0, end - ts))))
    return pd.DataFrame(rows, columns=FLOW_COLUMNS) if rows else empty
