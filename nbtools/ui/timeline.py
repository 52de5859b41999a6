"""Bokeh timelines of a Run: built once, updated by replacing data.

One figure per run with numeric y (one row per (rank, lane)) so every rank shares one x
axis, and one ColumnDataSource per layer. ``Timeline.update(run)`` only assigns
``source.data`` and a few scalar properties, which a live jupyter_bokeh BokehModel turns
into small PATCH-DOC messages instead of a re-render.

What goes into those sources, the level of detail (``lod``) included, is computed in
``timeline_data``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from bokeh.events import RangesUpdate
from bokeh.layouts import column
from bokeh.models import (BoxZoomTool, ColumnDataSource, FixedTicker, HoverTool, Legend,
                          LegendItem, PanTool, Range1d, ResetTool, SaveTool, WheelZoomTool)
from bokeh.plotting import figure
from bokeh.transform import factor_cmap

from nbtools.analysis import tables
from nbtools.results.comparison import category_ms   # the compare table and the delta chart: one number
from nbtools.analysis.tables import CATEGORIES
from nbtools.ui.timeline_data import (COMPILE_STYLE, SUMMARY_STACK, compile_data, events_data,
                            first_profiled_ns, initial_window, lane_sort_key, lod, origin_ns,
                            stack_depth, step_starts, steps_data, summary_data)

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#98df8a", "#9467bd", "#17becf", "#c5b0d5",
           "#c7c7c7")          # in CATEGORIES order
LOD_PX = 1200      # pixel columns the level of detail assumes when the width follows the page


class Timeline:
    """Per-rank lanes of one Run; ``update(run)`` swaps the data, never the models.

    Read like Perfetto: nested ranges stack into sub-rows under their lane (one box under
    the cursor, one tooltip), times are relative (ms on the axis, time into the step in the
    tooltip), the wheel zooms only after its tool is switched on in the toolbar (page
    scrolling passes over the plot), and the figures follow the notebook's width unless
    ``width`` (px) fixes it. ``collapse_cpu`` draws one CPU lane per rank instead of one per thread; ``backend`` is
    "canvas" (works everywhere, headless Chromium included) or "webgl"; ``live`` refines
    the level of detail on zoom (a Python callback, served by jupyter_bokeh's BokehModel);
    ``origin`` (epoch ns) is x = 0, by default the first traced (profiled) event, so earlier
    warm-up compiles sit at negative times; ``window`` is the
    initial view: "events" (the profiled steps) or "all" (warm-up compiles too).
    """

    def __init__(self, run=None, *, width: int | None = None, lane_height: int = 18,
                 collapse_cpu: bool = True, backend: str = "canvas", live: bool = True,
                 origin: int | None = None, x_range: Range1d | None = None,
                 title: str | None = None, window: str = "events"):
        self.width, self.lane_height, self.collapse_cpu = width, lane_height, collapse_cpu
        self.lod_px = width or LOD_PX
        self._size = (dict(width=width) if width else
                      dict(sizing_mode="stretch_width", min_width=500))
        self.window = window
        self._fixed_origin, self._title = origin, title
        self.stats: dict = {}
        self._prepared = None
        # Every source starts with its columns (empty), so the glyphs validate before data.
        marks, spans = compile_data(tables.empty(tables.COMPILE_COLUMNS), {}, 0)
        self.events_source = ColumnDataSource(events_data(None, {}, [], 0))
        self._step_ts: dict = {}
        self.compile_source, self.span_source = ColumnDataSource(marks), ColumnDataSource(spans)
        self.steps_source = ColumnDataSource(steps_data(tables.empty(tables.STEP_COLUMNS)))
        self.summary_source = ColumnDataSource(summary_data(pd.DataFrame(), []))
        self.figure = self._build_figure(backend, x_range)
        self.summary_figure = self._build_summary(backend)
        self.layout = column(self.figure, self.summary_figure,
                             **({} if width else dict(sizing_mode="stretch_width")))
        if live:   # works under jupyter_bokeh's BokehModel without a Bokeh server
            self.figure.on_event(RangesUpdate, self._on_ranges)
        if run is not None:
            self.update(run)

    # -- construction (once) -------------------------------------------------------------
    def _build_figure(self, backend, x_range):
        wheel = WheelZoomTool(dimensions="width",
                              description="Wheel zoom (click to switch on: off, the page scrolls)")
        fig = figure(height=200, output_backend=backend, **self._size,
                     x_range=x_range or Range1d(0, 1), y_range=Range1d(0.5, -0.5),
                     tools=[PanTool(dimensions="width"), wheel, BoxZoomTool(dimensions="width"),
                            ResetTool(), SaveTool()], active_drag="auto", active_scroll=None,
                     toolbar_location="above", x_axis_label="ms since the first profiled event")
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
        fig.add_tools(
            HoverTool(renderers=[r_ev], point_policy="follow_mouse",
                      tooltips=[("", "@name"), ("", "@category on @lane"), ("start", "@when"),
                                ("duration", "@dur"), ("", "@busy")]),
            HoverTool(renderers=[r_cmp],
                      tooltips=[("", "@kind @name"), ("frame", "@frame"), ("reason", "@reason"),
                                ("rank", "@rank"), ("step", "@step"), ("duration", "@dur"),
                                ("cache", "@cache"), ("at", "@x{0,0.000} ms")]))
        # Legend-only renderers hold one NaN row: nothing is drawn, but the legend
        # needs a row to draw its swatch from.
        nan = dict(y=[np.nan], left=[np.nan], right=[np.nan], height=0.8, line_color=None)
        # Keyed so that update() shows only what this run has (a CPU run: no CUDA graphs).
        self._legend = {c: LegendItem(label=c, renderers=[fig.hbar(fill_color=p, **nan)])
                        for c, p in zip(CATEGORIES, PALETTE)}
        self._legend["graph"] = LegendItem(label="CUDA-graph replay", renderers=[fig.hbar(
            fill_color="#7f7f7f", hatch_pattern="/", hatch_color="#ffffff", hatch_scale=6, **nan)])
        self._legend.update({k: LegendItem(label=k, renderers=[fig.scatter(
            x=[np.nan], y=[np.nan], marker=m, size=9, fill_color=c, line_color=c)])
            for k, (m, c) in COMPILE_STYLE.items()})
        fig.add_layout(Legend(items=list(self._legend.values()), orientation="horizontal",
                              label_text_font_size="8pt", glyph_width=14, spacing=4, padding=2,
                              margin=2, ncols=6), "above")
        return fig

    def _build_summary(self, backend):
        fig = figure(height=90, output_backend=backend, **self._size,
                     y_range=Range1d(0.5, -0.5),
                     x_range=Range1d(0, 1), x_axis_label="ms per profiled step (run.summary: profiled_window_ms, its parts)",
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
        if origin is None and self._fixed_origin is None:   # say what x = 0 is
            self.figure.xaxis.axis_label = ("ms since the first profiled event" if len(run.events)
                                            else "ms since the run's first step")
        events = self._prepare(run.events)
        ranks = sorted(set(events["rank"].unique().tolist())
                       | set(run.compile_events["rank"].unique().tolist())
                       | set(run.steps["rank"].unique().tolist()))
        depth = (events.groupby(["rank", "lane"], observed=True)["depth"].max().to_dict()
                 if len(events) else {})
        rows, lane_y = [], {}          # a lane's first row; its nested ranges go below it
        on = {r: (run.ranks.get(r) or run.ranks.get(str(r)) or {}).get("host") for r in ranks}
        several = len(set(on.values()) - {None}) > 1      # ranks on several hosts: say which
        for r in ranks:
            who = f"r{r}@{on[r]}" if several and on[r] else f"r{r}"
            lane_y[(r, "compile")] = len(rows)
            rows.append(f"{who} compile")
            lanes = events.loc[events["rank"] == r, "lane"].unique().tolist()
            for lane in sorted(map(str, lanes), key=lane_sort_key):
                lane_y[(r, lane)] = len(rows)
                rows += [f"{who} {lane}"] * (int(depth.get((r, lane), 0)) + 1)
        self._rows, self._lane_y, self._prepared = rows, lane_y, events
        self._step_ts = step_starts(run.steps)

        lo, hi = initial_window(run, t0, self.window)
        self.steps_source.data = steps_data(run.steps, ranks, lane_y, rows, t0, lo, hi)
        marks, spans = compile_data(run.compile_events, lane_y, t0)
        self.compile_source.data, self.span_source.data = marks, spans
        self._set_events(lo, hi)

        fig = self.figure
        present = set(events["category"].astype(str).unique()) if len(events) else set()
        present |= {"graph"} if len(events) and events["graph"].any() else set()
        present |= set(run.compile_events["kind"].astype(str).unique())
        for key, item in self._legend.items():
            item.visible = key in present
        legend_rows = -(-sum(k in present for k in self._legend) // fig.legend[0].ncols)
        fig.height = self.lane_height * len(rows) + 90 + 24 * max(legend_rows, 1)
        fig.y_range.start, fig.y_range.end = len(rows) - 0.5, -0.5
        firsts = sorted(lane_y.values())
        fig.yaxis.ticker.ticks = firsts
        fig.yaxis.major_label_overrides = {y: rows[y] for y in firsts}
        self.window_ms = ((lo - t0) / 1e6, (hi - t0) / 1e6)
        xr = fig.x_range
        xr.start, xr.end = xr.reset_start, xr.reset_end = self.window_ms
        before = int((run.compile_events["ts_ns"] < lo).sum()) if len(run.compile_events) else 0
        head = self._title or getattr(run, "label", "")
        fig.title.text = head + (f"  ({before} compile events before this window: zoom out)"
                                 if before else "")
        self.summary_source.data = data = summary_data(run.summary, ranks)
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
        self._set_events(lo, hi, width_px=2 * self.lod_px)

    def _on_ranges(self, event) -> None:
        if event.x0 is not None and event.x1 is not None:
            self.refine(event.x0, event.x1)

    def _prepare(self, events: pd.DataFrame) -> pd.DataFrame:
        if self.collapse_cpu and len(events):
            # Map categories, not rows: thread ids collapse to one CPU lane per rank.
            lane = pd.Categorical(events["lane"])
            merged = np.array([c if str(c).startswith("cuda") else "cpu"
                               for c in lane.categories], object)
            uniq, inverse = np.unique(merged, return_inverse=True)
            events = events.assign(lane=pd.Categorical.from_codes(inverse[lane.codes],
                                                                  categories=pd.Index(uniq)))
        return events.assign(depth=stack_depth(events))

    def _set_events(self, lo: int, hi: int, width_px: int | None = None) -> None:
        boxes = lod(self._prepared, width_px or self.lod_px, lo, hi)
        self.events_source.data = events_data(boxes, self._lane_y, self._rows, self.origin,
                                              self._step_ts)
        merged = boxes["count"].to_numpy() > 1
        self.stats = dict(events=int(boxes["count"].sum()), boxes=len(boxes),
                          merged_boxes=int(merged.sum()),
                          merged_events=int(boxes["count"].to_numpy()[merged].sum()),
                          pixel_ns=(hi - lo) / (width_px or self.lod_px))


def run_figure(run, **kw):
    """The timeline layout of one run (what ``Run.plot()`` shows)."""
    return Timeline(run, **kw).layout


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
    # one grey: a category's delta of two runs' profiled steps has no interval, and a colour
    # reads as a verdict (the verdict with its interval is the comparison's table)
    src = ColumnDataSource(dict(category=cats, a=va, b=vb, delta=delta,
                                color=np.full(len(cats), "#888888", dtype=object)))
    size = dict(width=kw["width"]) if kw.get("width") else dict(sizing_mode="stretch_width")
    bar = figure(**size, height=60 + 22 * max(len(cats), 1),
                 y_range=cats[::-1] or ["none"], toolbar_location=None, tools="",
                 title="time per category per profiled step and rank: B - A (ms; > 0: B longer; "
                       "no interval)",
                 output_backend=kw.get("backend", "canvas"))
    bar.hbar(y="category", left=0, right="delta", height=0.7, fill_color="color",
             line_color=None, source=src)
    bar.add_tools(HoverTool(tooltips=[("", "@category"), ("A", "@a{0.000} ms"),
                                      ("B", "@b{0.000} ms"), ("B - A", "@delta{+0.000} ms")]))
    return column(a.figure, b.figure, a.summary_figure, b.summary_figure, bar,
                  **({} if kw.get("width") else dict(sizing_mode="stretch_width")))
