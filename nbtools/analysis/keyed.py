"""Numpy per group for the summary tables: interval unions and sweeps, (rank, step) keys. Pure.

Why (rank, step) keys in numpy: a load summarises a few steps of a few ranks, and pandas'
merge, join, set_index and groupby each cost about a millisecond whatever the size, which
was most of the summary's time on a 40k-event trace. These give the same tables.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def pair_codes(rank: np.ndarray, step: np.ndarray):
    """(code per row, first seen first; each pair's rank; each pair's step). A pair is one
    integer: factorizing a MultiIndex builds a tuple per event."""
    rc, ranks = pd.factorize(rank)
    sc, steps = pd.factorize(step)
    codes, pairs = pd.factorize(rc.astype(np.int64) * len(steps) + sc)
    return codes, ranks[pairs // len(steps)], steps[pairs % len(steps)]


def lookup(rank, step, t_rank, t_step) -> np.ndarray | None:
    """Row of table (t_rank, t_step) holding each (rank, step), -1 where none; None when the
    table holds a pair twice (the caller then keeps pandas' behaviour)."""
    at: dict = {}
    for i, key in enumerate(zip(np.asarray(t_rank).tolist(), np.asarray(t_step).tolist())):
        if at.setdefault(key, i) != i:
            return None
    return np.array([at.get(k, -1) for k in zip(np.asarray(rank).tolist(),
                                                 np.asarray(step).tolist())], np.int64)


def group_median(g: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """Median of ``v`` per code 0..n-1 (NaN where none): the middle value, or the mean of
    the two middle ones, as pandas' groupby median gives, from one sort."""
    if not len(v):
        return np.full(n, np.nan)
    order = np.lexsort((v, g))
    g, v = g[order], v[order]
    cnt = np.bincount(g, minlength=n)
    first = np.cumsum(cnt) - cnt
    lo = v[np.minimum(first + (cnt - 1) // 2, len(v) - 1)]
    hi = v[np.minimum(first + cnt // 2, len(v) - 1)]
    return np.where(cnt == 0, np.nan, np.where(cnt % 2 == 1, lo, (lo + hi) / 2))


def union_ns(group: np.ndarray, start: np.ndarray, end: np.ndarray, n_groups: int) -> np.ndarray:
    """Length of the union of [start, end) per group id (0..n_groups-1), vectorised:
    sort by (group, start), shift each group past the previous one so a single running
    maximum of ends (cummax) never crosses groups, and count only what sticks out of it."""
    out = np.zeros(n_groups)
    if len(start) == 0:
        return out
    order = np.lexsort((start, group))
    g, s, e = group[order], start[order].astype(np.int64), end[order].astype(np.int64)
    first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    span = np.maximum.reduceat(e, first) - s[first]
    offset = np.concatenate([[0], np.cumsum(span[:-1] + 1)])
    which = np.cumsum(np.r_[True, g[1:] != g[:-1]]) - 1
    shift = (offset - s[first])[which]
    s, e = s + shift, e + shift
    covered = np.maximum.accumulate(e)
    prev = np.concatenate([[np.iinfo(np.int64).min], covered[:-1]])
    stick_out = np.clip(e - np.maximum(s, prev), 0, None)
    return np.bincount(g, weights=stick_out, minlength=n_groups)


def measure_ns(group, start, end, label, n_labels: int, n_groups: int, keep) -> np.ndarray:
    """Time per group during which ``keep(counts)`` holds, where ``counts[:, k]`` is how many
    label-k intervals cover that moment. A sweep over all starts and ends (sorted once),
    so set algebra between interval families (A minus B, A and B) stays vectorised."""
    out = np.zeros(n_groups)
    if len(start) == 0:
        return out
    t = np.concatenate([start, end]).astype(np.int64)
    g = np.concatenate([group, group])
    lab = np.concatenate([label, label])
    d = np.concatenate([np.ones(len(start), np.int32), -np.ones(len(end), np.int32)])
    order = np.lexsort((t, g))
    t, g, lab, d = t[order], g[order], lab[order], d[order]
    delta = np.zeros((len(t), n_labels), np.int32)
    delta[np.arange(len(t)), lab] = d
    counts = np.cumsum(delta, axis=0)    # every group's intervals close inside it
    same = g[1:] == g[:-1]
    hold = keep(counts[:-1]) & same
    return np.bincount(g[:-1][hold], weights=(t[1:] - t[:-1])[hold], minlength=n_groups)
