"""ui: the memory lane: per rank, the allocator's allocated (filled) and reserved (line)
bytes over time on the timeline's x axis, with memory held by CUDA-graph private pools
marked; each rank's band is scaled to its own peak (the hover and the row label give the
sizes, in the unit that fits: KB on CPU; "not measured on CPU" where the CPU has no value).
Renderers are named ``memory-...``. Hidden for runs recorded without StepConfig(memory=True).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from bokeh.models import ColumnDataSource, HoverTool

from nbtools.common.units import fmt_bytes
from nbtools.ui.timeline.lane import Lane

MAX_POINTS = 3000       # per rank: steps are kept at their maxima (a peak never disappears)
FIELDS = ("left", "right", "bottom", "top", "pool_top", "res_top", "rank", "alloc_mb",
          "res_mb", "pool_mb", "when", "alloc", "res", "pool")
ON_CPU = "not measured on CPU"    # the CPU allocator keeps no reserve and has no graph pools


def memory_data(mem: pd.DataFrame | None, ranks: list, t0: int) -> tuple[dict, dict]:
    """(the step quads source, the row labels {row: text}) from a run's memory table
    (rank, ts_ns, allocated, reserved, graph_pool: bytes after each allocator event)."""
    out = {k: [] for k in FIELDS}
    if mem is None or not len(mem):
        return out, {}
    labels, parts = {}, []
    for i, r in enumerate(ranks):
        m = mem[mem["rank"] == r].sort_values("ts_ns", kind="stable")
        if not len(m):
            continue
        ts = m["ts_ns"].to_numpy(np.int64)
        a, res, pool = (m[c].to_numpy(np.float64) for c in ("allocated", "reserved", "graph_pool"))
        if len(ts) > MAX_POINTS:       # bins keep their maximum: peaks stay visible
            edges = np.linspace(ts[0], ts[-1], MAX_POINTS + 1)
            b = np.clip(np.searchsorted(edges, ts, side="right") - 1, 0, MAX_POINTS - 1)
            starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
            ts, a, res, pool = (ts[starts], np.maximum.reduceat(a, starts),
                                np.maximum.reduceat(res, starts), np.maximum.reduceat(pool, starts))
        end = np.r_[ts[1:], ts[-1] + max((ts[-1] - ts[0]) // 100, 1)]
        # CPU ranks report no reserved bytes (NaN): a NaN peak would draw nothing at all
        peak = max([float(np.nanmax(v)) for v in (res, a) if np.isfinite(v).any()] + [1.0])
        base = i + 0.45
        h = lambda v: base - 0.9 * v / peak            # noqa: E731
        cpu = not np.isfinite(res).any()        # sizes for people: KB on CPU, GB on a GPU
        parts.append(dict(alloc=_sizes(a), res=_sizes(res, ON_CPU),
                          pool=np.full(len(ts), "none on CPU", object) if cpu else _sizes(pool),
                          left=(ts - t0) / 1e6, right=(end - t0) / 1e6,
                          bottom=np.full(len(ts), base), top=h(a), pool_top=h(np.minimum(pool, a)),
                          res_top=h(res), rank=np.full(len(ts), r, np.int32),
                          alloc_mb=a / 2**20, res_mb=res / 2**20, pool_mb=pool / 2**20,
                          when=np.asarray([f"{v:,.3f} ms" for v in ((ts - t0) / 1e6).tolist()],
                                          object)))
        labels[i] = f"r{r} memory (peak {fmt_bytes(peak)})"
    if parts:
        out = {k: np.concatenate([p[k] for p in parts]) for k in FIELDS}
    return out, labels


def _sizes(v: np.ndarray, none: str = "not measured") -> np.ndarray:
    """fmt_bytes of each value, computed once per distinct value (steps repeat them)."""
    uniq, inv = np.unique(v, return_inverse=True)
    return np.asarray([fmt_bytes(u, none) for u in uniq.tolist()], object)[inv.ravel()]


class MemoryLane(Lane):
    """One figure on the timeline's x range; ``update`` replaces its data."""

    def __init__(self, size: dict, backend: str, x_range):
        self.source = ColumnDataSource({k: [] for k in FIELDS})
        super().__init__(size, backend, x_range, name="memory-lane", height=100,
                         title="memory · allocated (filled), reserved (line), CUDA-graph "
                               "pools (dark)", x_axis_label="ms since the first profiled event")
        fig = self.figure
        alloc = fig.quad(left="left", right="right", bottom="bottom", top="top",
                         fill_color="#74c476", fill_alpha=0.8, line_color=None,
                         source=self.source, name="memory-allocated")
        fig.quad(left="left", right="right", bottom="bottom", top="pool_top",
                 fill_color="#238b45", line_color=None, hatch_pattern="/",
                 hatch_color="#ffffff", hatch_scale=5, source=self.source,
                 name="memory-graph-pool")
        fig.segment(x0="left", x1="right", y0="res_top", y1="res_top", line_color="#3f007d",
                    line_width=1.5, source=self.source, name="memory-reserved")
        fig.add_tools(HoverTool(renderers=[alloc], tooltips=[
            ("rank", "@rank"), ("at", "@when"), ("allocated", "@alloc"),
            ("reserved", "@res"), ("in CUDA-graph pools", "@pool")]))

    def update(self, mem, ranks: list, t0: int) -> None:
        """Redraw the memory lane for ``ranks`` from ``t0``; hidden when nothing was recorded."""
        self.source.data, labels = memory_data(mem, ranks, t0)
        self.show_rows(labels, len(ranks), 40)
