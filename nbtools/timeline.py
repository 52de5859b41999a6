"""Bokeh timelines of a Run: built once, updated by replacing data.

One figure per run with numeric y (one row per (rank, lane)) so every rank shares one x
axis, and one ColumnDataSource per layer. ``Timeline.update(run)`` only assigns
``source.data`` and a few scalar properties, which a live jupyter_bokeh BokehModel turns
into small PATCH-DOC messages instead of a re-render.

Event count must not limit the figure, so events go through ``lod`` first: per lane,
events narrower than a pixel are merged into one box per pixel column.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from bokeh.events import RangesUpdate
from bokeh.layouts import column
from bokeh.models import (ColumnDataSource, CustomJSHover, FixedTicker, HoverTool, Legend,
                          LegendItem, Range1d)
from bokeh.plotting import figure
from bokeh.transform import factor_cmap

from . import tables
from .tables import CATEGORIES

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#98df8a", "#9467bd", "#17becf", "#c5b0d5",
           "#c7c7c7")          # in CATEGORIES order
COMPILE_STYLE = {               # kind -> (marker, colour)
    "compile": ("square", "#1f77b4"),
    "recompile": ("triangle", "#d62728"),
    "graph_break": ("x", "#ff7f0e"),
    "cudagraph_skip": ("diamond", "#9467bd"),
    "cudagraph_record": ("circle", "#2ca02c"),
    "limit_hit": ("star", "#000000"),
}
SUMMARY_STACK = (("compute_ms", "compute", "#1f77b4"),
                 ("exposed_comm_ms", "exposed communication", "#d62728"),
                 ("idle_ms", "idle", "#e0e0e0"))
SUMMARY_TEXT = (("gpu_busy_pct", "busy {:.0f}%"), ("comm_ms", "comm {:.3g} ms"),
                ("exposed_comm_ms", "exposed {:.3g} ms"), ("idle_ms", "idle {:.3g} ms"))
_ABS_NS = """
// ms relative to the run's origin -> absolute epoch ns; BigInt keeps all 19 digits
if (format == "ns") {
  return (BigInt(meta.data.t0[0]) + BigInt(Math.round(value * 1e6))).toString()
}
return value.toFixed(4)
"""


def lod(events: pd.DataFrame, width_px: int, t0: int, t1: int) -> pd.DataFrame:
    """Level of detail for the window [t0, t1) (ns) drawn ``width_px`` wide.

    Per (rank, lane), events narrower than one pixel that start in the same pixel column
    (and are not split by a wider event) become one box: it spans the merged events,
    takes the category with most summed time, names its longest event, and counts them.
    Wider events pass through unchanged, so with nothing sub-pixel the output is the input.
    Returns rank, lane, category, name, ts_ns, dur_ns (the span), busy_ns (summed
    durations), count, step, graph (true when most of the busy time was graph-replayed).
    """
    ts, dur = events["ts_ns"].to_numpy(np.int64), events["dur_ns"].to_numpy(np.int64)
    keep = np.flatnonzero((ts < t1) & (ts + dur >= t0))
    px = max((t1 - t0) / max(int(width_px), 1), 1.0)
    lanes, lane_cats = _codes(events["lane"])
    cats, cat_cats = _codes(events["category"])
    names, name_cats = _codes(events["name"])
    key = events["rank"].to_numpy(np.int64) * (len(lane_cats) + 1) + lanes
    idx = keep[np.lexsort((ts[keep], key[keep]))]          # by lane, then start
    ts, dur, key = ts[idx], dur[idx], key[idx]

    small = dur < px
    column_px = np.floor((ts - t0) / px)
    new = np.ones(len(idx), bool)
    new[1:] = ((key[1:] != key[:-1]) | ~small[1:] | ~small[:-1]
               | (column_px[1:] != column_px[:-1]))
    starts = np.flatnonzero(new)
    ends = np.r_[starts[1:], len(idx)][:len(starts)]
    group = np.cumsum(new) - 1
    busy = np.add.reduceat(dur, starts)
    # Dominant category by summed time; +1 so zero-length events still vote.
    ncat = max(len(cat_cats), 1)
    votes = np.bincount(group * ncat + cats[idx], weights=dur + 1, minlength=len(starts) * ncat)
    longest = idx[np.lexsort((dur, group))[ends - 1]]     # the last of a group is its longest
    replayed = events["graph"].to_numpy(bool)
    graph_ns = np.add.reduceat(dur * replayed[idx], starts)
    return pd.DataFrame({
        "rank": events["rank"].to_numpy(np.int32)[idx[starts]],
        "lane": pd.Categorical.from_codes(lanes[idx[starts]], categories=pd.Index(lane_cats)),
        "category": pd.Categorical.from_codes(votes.reshape(len(starts), ncat).argmax(axis=1),
                                              categories=pd.Index(cat_cats)),
        "name": pd.Categorical.from_codes(names[longest], categories=pd.Index(name_cats)),
        "ts_ns": ts[starts], "dur_ns": np.maximum.reduceat(ts + dur, starts) - ts[starts],
        "busy_ns": busy, "count": (ends - starts).astype(np.int64),
        "step": events["step"].to_numpy(np.int32)[longest],
        "graph": np.where(busy > 0, 2 * graph_ns >= busy, replayed[longest])})


def _codes(col: pd.Series):
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy(np.int64), np.asarray(col.cat.categories, object)
    codes, uniques = pd.factorize(col.astype(str), sort=False)
    return codes.astype(np.int64), np.asarray(uniques, object)


def _lane_sort_key(lane: str):
    kind, _, rest = lane.partition(":")
    nums = [int(p) if p.lstrip("-").isdigit() else 0 for p in rest.split(":") if p]
    return (0 if kind == "cuda" else 1, nums, lane)


def origin_ns(run) -> int:
    """The x axis origin: the run's earliest timeline event (else step, else compile)."""
    for df in (run.events, run.steps, run.compile_events):
        if len(df):
            return int(df["ts_ns"].min())
    return 0


def first_profiled_ns(run) -> int:
    prof = run.steps[run.steps["phase"] == "profiled"] if len(run.steps) else run.steps
    return int(prof["ts_ns"].min()) if len(prof) else origin_ns(run)


class Timeline:
    """Per-rank lanes of one Run; ``update(run)`` swaps the data, never the models.

    ``collapse_cpu`` draws one CPU lane per rank instead of one per thread; ``backend`` is
    "canvas" (works everywhere, headless Chromium included) or "webgl"; ``live`` refines
    the level of detail on zoom (a Python callback, served by jupyter_bokeh's BokehModel);
    ``origin`` (epoch ns) is x = 0, by default the run's first event; ``window`` is the
    initial view: "events" (the profiled steps) or "all" (warm-up compiles too).
    """

    def __init__(self, run=None, *, width: int = 1100, lane_height: int = 22,
                 collapse_cpu: bool = True, backend: str = "canvas", live: bool = True,
                 origin: int | None = None, x_range: Range1d | None = None,
                 title: str | None = None, window: str = "events"):
        self.width, self.lane_height, self.collapse_cpu = width, lane_height, collapse_cpu
        self.window = window
        self._fixed_origin, self._title = origin, title
        self.stats: dict = {}
        self._prepared = None
        # Every source starts with its columns (empty), so the glyphs validate before data.
        marks, spans = _compile_data(tables.empty(tables.COMPILE_COLUMNS), {}, 0)
        self.events_source = ColumnDataSource(_events_data(None, {}, [], 0))
        self.compile_source, self.span_source = ColumnDataSource(marks), ColumnDataSource(spans)
        self.steps_source = ColumnDataSource(_steps_data(tables.empty(tables.STEP_COLUMNS)))
        self.summary_source = ColumnDataSource(_summary_data(pd.DataFrame(), []))
        self._meta = ColumnDataSource(dict(t0=["0"]))
        self.figure = self._build_figure(backend, x_range)
        self.summary_figure = self._build_summary(backend)
        self.layout = column(self.figure, self.summary_figure)
        if live:   # works under jupyter_bokeh's BokehModel without a Bokeh server
            self.figure.on_event(RangesUpdate, self._on_ranges)
        if run is not None:
            self.update(run)

    # -- construction (once) -------------------------------------------------------------
    def _build_figure(self, backend, x_range):
        fig = figure(width=self.width, height=200, output_backend=backend,
                     x_range=x_range or Range1d(0, 1), y_range=Range1d(0.5, -0.5),
                     tools="xpan,xwheel_zoom,xbox_zoom,reset,save", active_scroll="xwheel_zoom",
                     toolbar_location="above", x_axis_label="ms since the run's first event")
        fig.ygrid.grid_line_color = None
        fig.yaxis.ticker = FixedTicker(ticks=[])
        fig.quad(left="left", right="right", bottom="bottom", top="top", fill_color="shade",
                 fill_alpha=0.6, line_color=None, source=self.steps_source)
        fig.text(x="left", y="label_y", text="label", text_font_size="8pt", text_color="#777",
                 text_baseline="top", x_offset=2, source=self.steps_source)
        r_ev = fig.hbar(y="y", left="left", right="right", height=0.8,
                        fill_color=factor_cmap("category", PALETTE, CATEGORIES,
                                               nan_color="#7f7f7f"),
                        fill_alpha="alpha", line_color=None, hatch_pattern="hatch",
                        hatch_color="#ffffff", hatch_alpha=0.9, hatch_scale=6,
                        source=self.events_source)
        fig.hbar(y="y", left="left", right="right", height=0.35, fill_color="color",
                 fill_alpha=0.35, line_color="color", source=self.span_source)
        r_cmp = fig.scatter(x="x", y="y", marker="marker", size=11, fill_color="color",
                            line_color="color", source=self.compile_source)
        ns = CustomJSHover(args=dict(meta=self._meta), code=_ABS_NS)
        fig.add_tools(
            HoverTool(renderers=[r_ev], formatters={"@left": ns}, point_policy="follow_mouse",
                      tooltips=[("", "@name"), ("category", "@category"), ("lane", "@lane"),
                                ("step", "@step"), ("start", "@left{ms} ms (@left{ns} ns)"),
                                ("duration", "@dur_us{0,0.0} µs"),
                                ("busy", "@busy_us{0,0.0} µs in @count event(s)")]),
            HoverTool(renderers=[r_cmp], formatters={"@x": ns},
                      tooltips=[("", "@kind @name"), ("frame", "@frame"), ("reason", "@reason"),
                                ("rank", "@rank"), ("step", "@step"),
                                ("duration", "@dur_ms{0,0.000} ms"), ("cache", "@cache"),
                                ("at", "@x{ms} ms (@x{ns} ns)")]))
        # Legend-only renderers hold one NaN row: nothing is drawn, but the legend
        # needs a row to draw its swatch from.
        nan = dict(y=[np.nan], left=[np.nan], right=[np.nan], height=0.8, line_color=None)
        items = [LegendItem(label=c, renderers=[fig.hbar(fill_color=p, **nan)])
                 for c, p in zip(CATEGORIES, PALETTE)]
        items.append(LegendItem(label="CUDA-graph replay", renderers=[fig.hbar(
            fill_color="#7f7f7f", hatch_pattern="/", hatch_color="#ffffff", hatch_scale=6, **nan)]))
        items += [LegendItem(label=k, renderers=[fig.scatter(x=[np.nan], y=[np.nan], marker=m,
                                                             size=9, fill_color=c, line_color=c)])
                  for k, (m, c) in COMPILE_STYLE.items()]
        fig.add_layout(Legend(items=items, orientation="horizontal", label_text_font_size="8pt",
                              glyph_width=14, spacing=4, padding=2, margin=2), "above")
        fig.legend.ncols = 8
        return fig

    def _build_summary(self, backend):
        fig = figure(width=self.width, height=90, output_backend=backend,
                     y_range=Range1d(0.5, -0.5),
                     x_range=Range1d(0, 1), x_axis_label="ms (from run.summary)",
                     toolbar_location=None, tools="")
        fig.ygrid.grid_line_color = None
        fig.yaxis.ticker = FixedTicker(ticks=[])
        fields = [f for f, _, _ in SUMMARY_STACK]
        fig.hbar_stack(fields, y="y", height=0.7, color=[c for _, _, c in SUMMARY_STACK],
                       legend_label=[lab for _, lab, _ in SUMMARY_STACK],
                       source=self.summary_source)
        fig.text(x="text_x", y="y", text="text", text_font_size="8pt", text_baseline="middle",
                 x_offset=6, source=self.summary_source)
        legend = fig.legend[0]
        legend.orientation, legend.label_text_font_size = "horizontal", "8pt"
        legend.padding = legend.margin = 2
        fig.add_layout(legend, "above")
        return fig

    # -- data (every update) -------------------------------------------------------------
    def update(self, run, origin: int | None = None) -> None:
        """Replace every source's data with ``run``'s; the models stay the same objects."""
        t0 = origin if origin is not None else (self._fixed_origin if self._fixed_origin
                                                is not None else origin_ns(run))
        self.origin = t0
        events = self._prepare(run.events)
        ranks = sorted(set(events["rank"].unique().tolist())
                       | set(run.compile_events["rank"].unique().tolist())
                       | set(run.steps["rank"].unique().tolist()))
        rows, lane_y = [], {}
        for r in ranks:
            lane_y[(r, "compile")] = len(rows)
            rows.append(f"r{r} compile")
            lanes = events.loc[events["rank"] == r, "lane"].unique().tolist()
            for lane in sorted(map(str, lanes), key=_lane_sort_key):
                lane_y[(r, lane)] = len(rows)
                rows.append(f"r{r} {lane}")
        self._rows, self._lane_y, self._prepared = rows, lane_y, events

        lo, hi = _window(run, t0, self.window)
        self._meta.data = dict(t0=[str(t0)])
        self.steps_source.data = _steps_data(run.steps, ranks, lane_y, rows, t0, lo, hi)
        marks, spans = _compile_data(run.compile_events, lane_y, t0)
        self.compile_source.data, self.span_source.data = marks, spans
        self._set_events(lo, hi)

        fig = self.figure
        fig.height = max(120, self.lane_height * len(rows) + 110)
        fig.y_range.start, fig.y_range.end = len(rows) - 0.5, -0.5
        fig.yaxis.ticker.ticks = list(range(len(rows)))
        fig.yaxis.major_label_overrides = dict(enumerate(rows))
        self.window_ms = ((lo - t0) / 1e6, (hi - t0) / 1e6)
        xr = fig.x_range
        xr.start, xr.end = xr.reset_start, xr.reset_end = self.window_ms
        before = int((run.compile_events["ts_ns"] < lo).sum()) if len(run.compile_events) else 0
        head = self._title or getattr(run, "label", "")
        fig.title.text = head + (f"  ({before} compile events before this window: zoom out)"
                                 if before else "")
        self.summary_source.data = data = _summary_data(run.summary, ranks)
        # room on the right for the text beside the longest bar
        self.summary_figure.x_range.end = 1.8 * max(max(data["text_x"], default=0.0), 1e-3)
        self.summary_figure.title.text = f"per-rank summary · {head}"
        self.summary_figure.height = 85 + 24 * max(len(ranks), 1)
        self.summary_figure.y_range.start = max(len(ranks), 1) - 0.5
        self.summary_figure.yaxis.ticker.ticks = list(range(len(ranks)))
        self.summary_figure.yaxis.major_label_overrides = {i: f"rank {r}"
                                                           for i, r in enumerate(ranks)}

    def refine(self, x0_ms: float, x1_ms: float) -> None:
        """Re-run lod for the visible window, plus half a window either side so a short
        pan still has detail before the next refine."""
        if self._prepared is None or x1_ms <= x0_ms:
            return
        pad = (x1_ms - x0_ms) / 2
        lo = int(self.origin + (x0_ms - pad) * 1e6)
        hi = int(self.origin + (x1_ms + pad) * 1e6)
        self._set_events(lo, hi, width_px=2 * self.width)

    def _on_ranges(self, event) -> None:
        if event.x0 is not None and event.x1 is not None:
            self.refine(event.x0, event.x1)

    def _prepare(self, events: pd.DataFrame) -> pd.DataFrame:
        if not self.collapse_cpu or not len(events):
            return events
        # Map categories, not rows: thread ids collapse to one CPU lane per rank.
        lane = pd.Categorical(events["lane"])
        merged = np.array([c if str(c).startswith("cuda") else "cpu" for c in lane.categories],
                          object)
        uniq, inverse = np.unique(merged, return_inverse=True)
        return events.assign(lane=pd.Categorical.from_codes(inverse[lane.codes],
                                                            categories=pd.Index(uniq)))

    def _set_events(self, lo: int, hi: int, width_px: int | None = None) -> None:
        boxes = lod(self._prepared, width_px or self.width, lo, hi)
        self.events_source.data = _events_data(boxes, self._lane_y, self._rows, self.origin)
        merged = boxes["count"].to_numpy() > 1
        self.stats = dict(events=int(boxes["count"].sum()), boxes=len(boxes),
                          merged_boxes=int(merged.sum()),
                          merged_events=int(boxes["count"].to_numpy()[merged].sum()),
                          pixel_ns=(hi - lo) / (width_px or self.width))


def _window(run, t0, mode):
    """The initial x window (ns): the profiled events, or with mode "all" (or no events)
    the warm-up steps and compiles too."""
    frames = [run.events] if len(run.events) and mode == "events" else \
        [df for df in (run.events, run.steps, run.compile_events) if len(df)]
    if not frames:
        return t0, t0 + 1_000_000
    lo = min(int(df["ts_ns"].min()) for df in frames)
    hi = max(int((df["ts_ns"] + df["dur_ns"]).max()) for df in frames)
    pad = max((hi - lo) // 100, 1)
    return lo - pad, hi + pad


def _events_data(boxes: pd.DataFrame | None, lane_y: dict, rows: list, t0: int) -> dict:
    if boxes is None or not len(boxes):
        return {k: [] for k in ("left", "right", "y", "category", "name", "lane", "step",
                                "count", "dur_us", "busy_us", "alpha", "hatch")}
    rank = boxes["rank"].to_numpy(np.int64)
    codes, cats = _codes(boxes["lane"])
    # (rank, lane) -> row through a lookup table over the few distinct lanes
    ranks = np.unique(rank)
    table = np.array([[lane_y.get((int(r), str(c)), -1) for c in cats] for r in ranks], np.int32)
    y = table[np.searchsorted(ranks, rank), codes]
    ts = boxes["ts_ns"].to_numpy(np.int64)
    dur = boxes["dur_ns"].to_numpy(np.int64)
    busy = boxes["busy_ns"].to_numpy(np.int64)
    count = boxes["count"].to_numpy(np.int64)
    cat = boxes["category"].astype(str).to_numpy(object)
    name = boxes["name"].astype(str).to_numpy(object)
    merged = count > 1
    if merged.any():
        name = name.copy()
        name[merged] = (pd.Series(count[merged]).astype(str) + " merged · longest: "
                        + pd.Series(name[merged])).to_numpy(object)
    # A merged box is drawn as wide as its span; its opacity says how full that span was.
    alpha = np.where(merged, np.clip(busy / np.maximum(dur, 1), 0.35, 1.0), 1.0)
    alpha = np.where(cat == "annotation", 0.3, alpha).astype(np.float32)
    return dict(left=(ts - t0) / 1e6, right=(ts + dur - t0) / 1e6, y=y, category=cat,
                name=name, lane=np.asarray(rows, object)[y],
                step=boxes["step"].to_numpy(np.int32), count=count.astype(np.int32),
                dur_us=(dur / 1e3).astype(np.float32), busy_us=(busy / 1e3).astype(np.float32),
                alpha=alpha, hatch=np.where(boxes["graph"].to_numpy(bool), "/", " ").astype(object))


def _steps_data(steps, ranks=(), lane_y=None, rows=(), t0=0, lo=0, hi=0) -> dict:
    prof = steps[steps["phase"] == "profiled"]
    if not len(prof) and len(steps):   # e.g. traces without phases: steps inside the window
        prof = steps[(steps["ts_ns"] < hi) & (steps["ts_ns"] + steps["dur_ns"] > lo)]
    if not len(prof):
        return dict(left=[], right=[], bottom=[], top=[], shade=[], label=[], label_y=[])
    rank = prof["rank"].to_numpy(np.int64)
    # Each rank's band covers its own rows: from its compile row to the next rank's.
    first = {r: lane_y[(r, "compile")] for r in ranks}
    nxt = {r: (first[ranks[i + 1]] if i + 1 < len(ranks) else len(rows))
           for i, r in enumerate(ranks)}
    top = np.array([first[r] for r in rank.tolist()], float) - 0.5
    bottom = np.array([nxt[r] for r in rank.tolist()], float) - 0.5
    ts = prof["ts_ns"].to_numpy(np.int64)
    step = prof["step"].to_numpy(np.int32)
    return dict(left=(ts - t0) / 1e6, right=(ts + prof["dur_ns"].to_numpy(np.int64) - t0) / 1e6,
                bottom=bottom, top=top,
                shade=np.where(step % 2 == 0, "#f2f2f2", "#e6eef7").astype(object),
                label=np.char.add("step ", step.astype(str)).astype(object), label_y=top + 0.05)


def _compile_data(ce, lane_y, t0):
    if not len(ce):
        return ({k: [] for k in ("x", "y", "marker", "color", "kind", "name", "frame", "reason",
                                 "dur_ms", "step", "rank", "cache")},
                dict(left=[], right=[], y=[], color=[]))
    kind = ce["kind"].astype(str).to_numpy(object)
    style = [COMPILE_STYLE.get(k, ("circle", "#7f7f7f")) for k in kind]   # compile events are few
    ts = ce["ts_ns"].to_numpy(np.int64)
    dur = ce["dur_ns"].to_numpy(np.int64)
    y = np.array([lane_y[(r, "compile")] for r in ce["rank"].tolist()], np.int32)
    color = np.array([c for _, c in style], object)
    marks = dict(x=(ts - t0) / 1e6, y=y, marker=np.array([m for m, _ in style], object),
                 color=color, kind=kind, name=ce["name"].astype(str).to_numpy(object),
                 frame=ce["frame"].astype(str).to_numpy(object),
                 reason=ce["reason"].astype(str).to_numpy(object), dur_ms=dur / 1e6,
                 step=ce["step"].to_numpy(np.int32),
                 rank=ce["rank"].to_numpy(np.int32), cache=ce["cache"].astype(str).to_numpy(object))
    has = dur > 0
    spans = dict(left=(ts[has] - t0) / 1e6, right=(ts[has] + dur[has] - t0) / 1e6, y=y[has],
                 color=color[has])
    return marks, spans


def _summary_data(summary: pd.DataFrame, ranks: list) -> dict:
    """Read (never compute) the per-rank numbers; missing columns draw as 0 and say n/a."""
    out = dict(y=np.arange(len(ranks), dtype=np.int32), text=[])
    by_rank = summary.drop_duplicates("rank").set_index("rank") if "rank" in summary.columns \
        else summary
    for f, _, _ in SUMMARY_STACK:
        col = by_rank[f] if f in by_rank.columns else None
        out[f] = np.array([float(col.get(r, np.nan)) if col is not None else np.nan
                           for r in ranks], float)
        out[f] = np.nan_to_num(out[f], nan=0.0)
    out["text_x"] = sum(out[f] for f, _, _ in SUMMARY_STACK)
    for r in ranks:
        parts = []
        for f, fmt in SUMMARY_TEXT:
            v = by_rank[f].get(r, np.nan) if f in by_rank.columns else np.nan
            parts.append(fmt.format(float(v)) if pd.notna(v) else fmt.split(" ")[0] + " n/a")
        out["text"].append(" · ".join(parts))
    return out


def run_figure(run, **kw):
    """The timeline layout of one run (what ``Run.plot()`` shows)."""
    return Timeline(run, **kw).layout


def category_ms(run) -> pd.Series:
    from .analysis import category_ms as per_category
    return per_category(run.events, run.steps)


def compare_figure(run_a, run_b, **kw):
    """Two runs stacked, aligned at the start of their first profiled step, plus the
    change in time per category (B - A)."""
    shared = Range1d(0, 1)
    a = Timeline(run_a, origin=first_profiled_ns(run_a), x_range=shared,
                 title=f"A {run_a.label}", **kw)
    b = Timeline(run_b, origin=first_profiled_ns(run_b), x_range=shared,
                 title=f"B {run_b.label}", **kw)
    for tl in (a, b):
        tl.figure.xaxis.axis_label = "ms since the first profiled step"
    # Each update set the shared range to its own window; show both.
    shared.start = shared.reset_start = min(a.window_ms[0], b.window_ms[0])
    shared.end = shared.reset_end = max(a.window_ms[1], b.window_ms[1])
    ca, cb = category_ms(run_a), category_ms(run_b)
    cats = [c for c in CATEGORIES if c in ca.index or c in cb.index] + \
        sorted((set(ca.index) | set(cb.index)) - set(CATEGORIES))
    va = np.array([float(ca.get(c, 0.0)) for c in cats])
    vb = np.array([float(cb.get(c, 0.0)) for c in cats])
    delta = vb - va
    src = ColumnDataSource(dict(category=cats, a=va, b=vb, delta=delta,
                                color=np.where(delta > 0, "#d62728", "#2ca02c").astype(object)))
    bar = figure(width=kw.get("width", 1100), height=60 + 22 * max(len(cats), 1),
                 y_range=cats[::-1] or ["none"], toolbar_location=None, tools="",
                 title="time per category per profiled step and rank: B - A (ms; red = B slower)",
                 output_backend=kw.get("backend", "canvas"))
    bar.hbar(y="category", left=0, right="delta", height=0.7, fill_color="color",
             line_color=None, source=src)
    bar.add_tools(HoverTool(tooltips=[("", "@category"), ("A", "@a{0.000} ms"),
                                      ("B", "@b{0.000} ms"), ("B - A", "@delta{+0.000} ms")]))
    return column(a.figure, b.figure, a.summary_figure, b.summary_figure, bar)

