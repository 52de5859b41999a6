"""ui: a Run's per-rank timeline (Bokeh), built once and updated by replacing data.

One figure with numeric y (one row per (rank, lane, depth)) so every rank shares one x axis,
and one ColumnDataSource per layer. ``Timeline.update(run)`` only assigns ``source.data``
and a few scalar properties, which a live jupyter_bokeh BokehModel turns into small
PATCH-DOC messages instead of a re-render. What goes into the sources (the level of detail
included) is computed in ``data``; search, region table, names and flows are in
``interactions`` (BokehJS, so they work in exported HTML too); compiles are in
``compile_strip``; memory in ``memory``; why the GPU waits in ``waits``; the machine's
signals in ``signals``.
"""
from __future__ import annotations

import html

import numpy as np
import pandas as pd
from bokeh.events import RangesUpdate
from bokeh.layouts import column, row
from bokeh.models import (BoxZoomTool, ColumnDataSource, Div, FixedTicker, HoverTool, Legend,
                          LegendItem, PanTool, Range1d, ResetTool, SaveTool, WheelZoomTool)
from bokeh.plotting import figure
from bokeh.transform import linear_cmap

from nbtools.schema import tables
from nbtools.analysis.collective_flows import collective_flows
from nbtools.schema.tables import CATEGORIES, lane_label, string_codes
from nbtools.ui.timeline.compile_strip import CompileStrip
from nbtools.ui.timeline.data import (decode, events_data, fmt_ns, initial_window,
                                      lane_sort_key, lod, moving_data, origin_ns, origin_words,
                                      spans, stack_depth, step_starts, step_table, steps_data)
from nbtools.ui.timeline.interactions import (CHAR_PX, Controls, duration_hover, fit_labels,
                                              lane_hover, link_labels, merged_hover,
                                              name_hover, only_if_none, start_hover,
                                              swap_while_moving)
from nbtools.ui.timeline.memory import MemoryLane
from nbtools.ui.timeline.waits import WaitsLane
from nbtools.ui.timeline.region import RegionTable
from nbtools.ui.timeline.signals import SignalsLane
from nbtools.ui.timeline.summary_strip import SummaryStrip

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#98df8a", "#9467bd", "#17becf", "#c5b0d5",
           "#c7c7c7")          # in CATEGORIES order
LOD_PX = 1200      # pixel columns the level of detail assumes when the width follows the page
FLOW_FIELDS = ("x0", "y0", "x1", "y1", "text", "wait")
MOVING_BOXES = 1500   # drawn while the wheel turns: under BokehJS's lod_threshold (2000)
MAX_FLOWS = 400    # per drawn window, the longest waits: more arrows hide the boxes (and weigh MBs)


def notice(run) -> str:
    """One line above a timeline that has something missing to explain: a failed run (its
    first error, and whether anything was recorded before it), or a run with nothing to
    draw. '' otherwise."""
    nothing = not (len(run.events) or len(run.steps) or len(run.compile_events))
    style = "<span style='font-size:12px;color:#a50f15'>"
    if not run.ok:
        # the error is the run's text (a step may raise anything): shown, never run
        why = html.escape(run.first_error().strip().rstrip(".")) or "no rank said why"
        return (f"{style}Run failed ({why}): " + ("nothing was recorded to draw."
                if nothing else "below is what the ranks recorded before it stopped.")
                + "</span>")
    if nothing:
        return (f"{style}Nothing to draw: this run recorded no steps, compile events or "
                "timeline events.</span>")
    return ""


class Timeline:
    """Per-rank lanes of one Run; ``update(run)`` swaps the data, never the models.

    Read like Perfetto: one row per CPU thread (``cpu:<tid>``) and GPU stream, nested ranges
    stack into labelled sub-rows under their lane (one box under the cursor, one tooltip),
    names are drawn inside the boxes wide enough for them, times are relative (ms on the
    axis, time into the step in the tooltip). Above the figure: a search field (matches
    outlined on every rank, their count and total time) and the flows switch; select a
    time range with the box-select tool for a table of what it holds. Beside it, on its own
    axis, the compile strip (every step and compile of each rank). The wheel zooms only after
    its tool is switched on in the toolbar (page scrolling passes over the plot); while it
    turns, binned boxes stand in for the boxes (``moving_source``). The
    figures follow the notebook's width unless ``width`` (px) fixes it. ``collapse_cpu``
    draws one CPU lane per rank instead of one per thread; ``backend`` is "canvas" (works
    everywhere, headless Chromium included) or "webgl"; ``live`` refines the level of detail
    on zoom (a Python callback, served by jupyter_bokeh's BokehModel); ``origin`` (epoch ns)
    is x = 0, by default the first traced (profiled) event; ``window``: "events" (the
    profiled steps' events first, the compile strip below) or "all" (the whole run first:
    the compile strip, every step and compile in seconds, its axis cut where a long compile
    would squeeze the steps; the events, which only the profiled steps have, below). A
    failed run, or one with nothing to draw, says so in a line above. ``signals``: the
    machine signals to draw in their lanes (``signals.py``), default all.
    """

    def __init__(self, run=None, *, width: int | None = None, lane_height: int = 18,
                 collapse_cpu: bool = False, backend: str = "canvas", live: bool = True,
                 origin: int | None = None, x_range: Range1d | None = None,
                 title: str | None = None, window: str = "events", signals=None):
        self.width, self.lane_height, self.collapse_cpu = width, lane_height, collapse_cpu
        self.only_signals = None if signals is None else set(signals)
        self.lod_px = width or LOD_PX
        self._size = (dict(width=width) if width else
                      dict(sizing_mode="stretch_width", min_width=500))
        if window not in ("events", "all"):
            raise ValueError(f"window={window!r}: 'events' (the profiled steps first) or 'all' "
                             "(the whole run first, on the compile strip)")
        self.window = window
        self._fixed_origin, self._title = origin, title
        self.stats: dict = {}
        self._prepared, self._rows, self._labels = None, [], []
        self._flow_table = None
        # Every source starts with its columns (empty), so the glyphs validate before data.
        self.events_source = ColumnDataSource(
            {k: v for k, v in events_data(None, {}, [], 0).items() if k != "details"})
        self._step_ts: dict = {}
        self._details = None
        self.steps_source = ColumnDataSource(steps_data(tables.empty(tables.STEP_COLUMNS)))
        self.labels_source = ColumnDataSource(dict(x=[], y=[], text=[]))
        self.graph_source = ColumnDataSource(dict(left=[], right=[], y=[]))
        self.moving_source = ColumnDataSource(moving_data(events_data(None, {}, [], 0), 1))
        self.step_start_source = ColumnDataSource(step_table({}, 0))
        # what the boxes' codes stand for (events_data): one string per name and row
        self.names_source = ColumnDataSource(dict(name=[]))
        self.rows_source = ColumnDataSource(dict(row=[]))
        self.details_source = ColumnDataSource(dict(detail=[""]))
        self.step_labels_source = ColumnDataSource(dict(x=[], y=[], text=[]))
        self.flows_source = ColumnDataSource({k: [] for k in FLOW_FIELDS})
        self.figure = self._build_figure(backend, x_range)
        self.controls = Controls(self.figure, self.events_source, self._r_flows,
                                 self.names_source)
        self.region = RegionTable(self.figure, self.events_source, self._r_events,
                                  self.names_source, self._size)
        self.strip = CompileStrip(self._size, backend)
        self.compile_source, self.span_source = self.strip.mark_source, self.strip.span_source
        self.memory = MemoryLane(self._size, backend, self.figure.x_range)
        self.waits = WaitsLane(self._size, backend, self.figure.x_range)
        self.signals = SignalsLane(self._size, backend, self.figure.x_range)   # same x range
        self.swap_on(self.figure, self.memory.figure, self.waits.figure, self.signals.figure)
        self.summary = SummaryStrip(self._size, backend)
        self.summary_source, self.summary_figure = self.summary.source, self.summary.figure
        c, reg = self.controls, self.region
        stretch = {} if width else dict(sizing_mode="stretch_width")
        self.notice = Div(text="", name="timeline-notice", visible=False)
        # window="all": the whole run first, on the strip's axis in seconds (cut where a
        # long compile would squeeze the steps); the profiled steps' events below
        strip = [self.strip.figure, self.strip.untimed]
        events = [row(c.search, c.search_out, c.flows), self.figure, self.waits.figure,
                  row(reg.group, reg.out), reg.table, self.memory.figure, self.signals.figure]
        parts = strip + events if window == "all" else events + strip
        self.layout = column(self.notice, *parts, self.summary_figure, **stretch)
        if live:   # works under jupyter_bokeh's BokehModel without a Bokeh server
            self.figure.on_event(RangesUpdate, self._on_ranges)
        if run is not None:
            self.update(run)

    # -- construction (once) -------------------------------------------------------------
    def _build_figure(self, backend, x_range):
        wheel = WheelZoomTool(dimensions="width",
                              description="Wheel zoom (click to switch on: off, the page scrolls)")
        fig = figure(height=200, output_backend=backend, **self._size, name="timeline",
                     x_range=x_range or Range1d(0, 1), y_range=Range1d(0.5, -0.5),
                     tools=[PanTool(dimensions="width"), wheel, BoxZoomTool(dimensions="width"),
                            ResetTool(), SaveTool()], active_drag="auto", active_scroll=None,
                     toolbar_location="above", x_axis_label="ms since the first profiled event")
        fig.ygrid.grid_line_color = None
        fig.yaxis.ticker = FixedTicker(ticks=[])
        fig.yaxis.major_label_text_font_size = "8pt"
        fig.quad(left="left", right="right", bottom="bottom", top="top", fill_color="shade",
                 fill_alpha=0.6, line_color=None, source=self.steps_source)
        fig.text(x="x", y="y", text="text", text_font_size="8pt", text_color="#777",
                 text_baseline="top", x_offset=2, source=self.step_labels_source,
                 name="step-labels")
        self._r_events = r_ev = fig.hbar(
            y="y", left="left", right="right", height=0.8,
            # cat_i indexes CATEGORIES: bin k of the mapper is colour k; -1 (unknown) is grey
            fill_color=linear_cmap("cat_i", PALETTE, low=-0.5, high=len(PALETTE) - 0.5,
                                   low_color="#7f7f7f", nan_color="#7f7f7f"),
            fill_alpha="alpha", line_color=None, source=self.events_source, name="events")
        r_ev.nonselection_glyph.fill_alpha = 0.35
        self._r_moving = fig.hbar(y="y", left="left", right="right", height=0.8,
                                  fill_color=r_ev.glyph.fill_color, fill_alpha="alpha",
                                  line_color=None, source=self.moving_source,
                                  name="events-moving", visible=False)
        # Graph replays hatched by an overlay with one (scalar) pattern: a per-box hatch
        # column makes BokehJS build a pattern canvas per box on every paint (10k boxes: 18 s
        # to first paint in Chromium, a 100k-event page never finished)
        fig.hbar(y="y", left="left", right="right", height=0.8, fill_color=None,
                 line_color=None, hatch_pattern="/", hatch_color="#ffffff", hatch_alpha=0.9,
                 hatch_scale=6, source=self.graph_source, name="graph-replays")
        fig.text(x="x", y="y", text="text", text_font_size="8pt", text_color="#111111",
                 text_baseline="middle", x_offset=2, source=self.labels_source,
                 name="event-names")
        seg = fig.segment(x0="x0", y0="y0", x1="x1", y1="y1", line_color="#e6550d",
                          line_width=1.5, line_alpha=0.8, source=self.flows_source, name="flows")
        head = fig.scatter(x="x1", y="y1", marker="circle", size=5, fill_color="#e6550d",
                           line_color=None, source=self.flows_source, name="flow-ends")
        self._r_flows = [seg, head]
        # one tooltip at a time: the flow's tool goes first (BokehJS inspects in tool order),
        # and the box's stays quiet while the cursor is on a flow
        fig.add_tools(
            HoverTool(renderers=[seg], line_policy="interp", tooltips=[("", "@text")]),
            HoverTool(renderers=[r_ev], point_policy="follow_mouse",
                      filters={"@name_i": only_if_none(self.flows_source, seg)},
                      tooltips=[("", "@name_i{custom}"), ("", "@cat_i{custom}"),
                                ("start", "@left{custom}"), ("duration", "@right{custom}"),
                                ("", "@busy_ns{custom}"), ("", "@detail_i{custom}")],
                      formatters={"@busy_ns": merged_hover(self.events_source),
                                  "@name_i": name_hover(self.names_source),
                                  "@detail_i": name_hover(self.details_source, "detail"),
                                  "@cat_i": lane_hover(self.events_source, self.rows_source),
                                  "@left": start_hover(self.events_source,
                                                       self.step_start_source),
                                  "@right": duration_hover(self.events_source)}))
        # Legend-only renderers hold one NaN row: nothing is drawn, but the legend
        # needs a row to draw its swatch from.
        nan = dict(y=[np.nan], left=[np.nan], right=[np.nan], height=0.8, line_color=None)
        # Keyed so that update() shows only what this run has (a CPU run: no CUDA graphs).
        self._legend = {c: LegendItem(label=c, renderers=[fig.hbar(fill_color=p, **nan)])
                        for c, p in zip(CATEGORIES, PALETTE)}
        self._legend["graph"] = LegendItem(label="CUDA-graph replay", renderers=[fig.hbar(
            fill_color="#7f7f7f", hatch_pattern="/", hatch_color="#ffffff", hatch_scale=6, **nan)])
        self._legend["flows"] = LegendItem(label="collective: waited for the last rank",
                                           renderers=[seg])
        fig.add_layout(Legend(items=list(self._legend.values()), orientation="horizontal",
                              label_text_font_size="8pt", glyph_width=14, spacing=4, padding=2,
                              margin=2, ncols=6), "above")
        link_labels(fig, [self.events_source, self.steps_source], ["y", "label_y"],
                    ["name_i", "label"], [self.labels_source, self.step_labels_source],
                    self.lod_px, [self.names_source, None])
        return fig

    def swap_on(self, *figures) -> None:
        """Draw the binned boxes while any of ``figures`` (on this x range) moves."""
        swap_while_moving(list(figures), [self._r_events, self.controls.hits], [self._r_moving])

    # -- data (every update) -------------------------------------------------------------
    def update(self, run, origin: int | None = None) -> None:
        """Replace every source's data with ``run``'s; the models stay the same objects."""
        t0 = origin if origin is not None else (self._fixed_origin if self._fixed_origin
                                                is not None else origin_ns(run))
        self.origin = t0
        if origin is None and self._fixed_origin is None:   # say what x = 0 is, on every lane
            for fig in (self.figure, self.memory.figure, self.signals.figure):
                fig.xaxis.axis_label = origin_words(run)
        events = self._prepare(run.events)
        ranks = sorted(set(events["rank"].unique().tolist())
                       | set(run.compile_events["rank"].unique().tolist())
                       | set(run.steps["rank"].unique().tolist()))
        depth = (events.groupby(["rank", "lane"], observed=True)["depth"].max().to_dict()
                 if len(events) else {})
        rows, labels, lane_y, first = [], [], {}, {}  # a lane's first row; nested ranges below
        on = {r: (run.ranks.get(r) or run.ranks.get(str(r)) or {}).get("host") for r in ranks}
        several = len(set(on.values()) - {None}) > 1      # ranks on several hosts: say which
        for r in ranks:
            who = f"r{r}@{on[r]}" if several and on[r] else f"r{r}"
            first[r] = len(rows)
            lanes = events.loc[events["rank"] == r, "lane"].unique().tolist() if len(events) \
                else []
            for lane in sorted(map(str, lanes), key=lane_sort_key):
                lane_y[(r, lane)] = len(rows)
                n = int(depth.get((r, lane), 0)) + 1
                rows += [f"r{r} {lane}"] * n
                labels += [who + lane_label(r, lane)[len(f"r{r}"):]] \
                    + [f"· depth {d}" for d in range(1, n)]
            if first[r] == len(rows):        # a rank with steps but no traced events
                rows.append(f"r{r}")
                labels.append(f"{who} (no profiled events)")
        self._rows, self._labels, self._lane_y, self._prepared = rows, labels, lane_y, events
        # one box per pixel of the plot itself: the figure's width less the row labels
        # (1100 px with "r0 GPU 0 stream 13": 986 px in Chromium; the estimate is 983)
        self.lod_px = max(int((self.width or LOD_PX) - CHAR_PX * max(map(len, labels),
                                                                     default=0) - 5), 100)
        # before the boxes: their data change refits the names from these
        self.rows_source.data = dict(row=list(labels))      # "r0 GPU 0 stream 7", as the axis
        self.names_source.data = dict(name=list(string_codes(events["name"])[1])
                                      if len(events) else [])
        self._step_ts = step_starts(run.steps)
        self.step_start_source.data = step_table(self._step_ts, t0)
        self._details = getattr(run, "event_details", None)

        lo, hi = initial_window(run, t0, self.window)
        self.steps_source.data = steps_data(run.steps, ranks, first, rows, t0, lo, hi, events)
        self._flow_table = collective_flows(run.events)
        fig = self.figure
        self.window_ms = ((lo - t0) / 1e6, (hi - t0) / 1e6)
        xr = fig.x_range
        xr.start, xr.end = xr.reset_start, xr.reset_end = self.window_ms
        self._set_events(lo, hi)
        self.controls.update(run.events)
        self.region.update(run.events, t0)
        self.strip.update(run, ranks)
        self.memory.update(getattr(run, "memory", None), ranks, t0)
        self.waits.update(run.events, ranks, t0)
        self.signals.update(run, ranks, t0, self.only_signals)

        present = set(events["category"].astype(str).unique()) if len(events) else set()
        present |= {"graph"} if len(events) and events["graph"].any() else set()
        present |= {"flows"} if len(self.flows_source.data["x0"]) else set()
        for key, item in self._legend.items():
            item.visible = key in present
        legend_rows = -(-sum(k in present for k in self._legend) // fig.legend[0].ncols)
        fig.height = self.lane_height * len(rows) + 90 + 24 * max(legend_rows, 1)
        fig.y_range.start, fig.y_range.end = len(rows) - 0.5, -0.5
        fig.yaxis.ticker.ticks = list(range(len(rows)))
        fig.yaxis.major_label_overrides = dict(enumerate(labels))
        # capture=light/off: no events, the compile strip carries the steps
        fig.visible = bool(len(events))
        self.controls.set_visible(bool(len(events)))
        self.region.set_visible(bool(len(events)))
        head = self._title or getattr(run, "label", "")
        fig.title.text = head
        self.summary.update(run.summary, ranks, head)
        self.notice.text = notice(run)
        self.notice.visible = bool(self.notice.text)

    def _flows(self, lo: int, hi: int) -> dict:
        fl, t0 = self._flow_table, self.origin
        if fl is None or not len(fl):
            self.controls.flows.label = "flows between ranks' collectives"
            return {k: [] for k in FLOW_FIELDS}
        inside = fl[(fl["ts_ns"] < hi) & (fl["last_ts_ns"] >= lo)]
        fl = inside.nlargest(MAX_FLOWS, "wait_ns", keep="first") if len(inside) > MAX_FLOWS \
            else inside
        self.controls.flows.label = "flows between ranks' collectives" + (
            f" ({len(fl):,} longest waits of {len(inside):,} here: zoom in for all)"
            if len(inside) > len(fl) else "")

        def y(rank, lane):
            return self._lane_y.get((rank, lane), self._lane_y.get((rank, "cpu"), np.nan))
        wait = fl["wait_ns"].to_numpy(np.int64)
        text = [f"{n} (step {s}, #{k + 1} in the step): rank {r} waited {w} for rank {last}"
                for n, s, k, r, w, last in zip(fl["name"], fl["step"], fl["k"], fl["rank"],
                                                fmt_ns(wait), fl["last_rank"])]
        return dict(x0=(fl["ts_ns"].to_numpy(np.int64) - t0) / 1e6,
                    y0=[y(r, ln) for r, ln in zip(fl["rank"], fl["lane"])],
                    x1=(fl["last_ts_ns"].to_numpy(np.int64) - t0) / 1e6,
                    y1=[y(r, ln) for r, ln in zip(fl["last_rank"], fl["last_lane"])],
                    text=text, wait=wait / 1e6)

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
        d = events_data(boxes, self._lane_y, self._rows, self.origin, self._details)
        self.details_source.data = dict(detail=d.pop("details"))   # before the codes into it
        self.events_source.data = d
        self.moving_source.data = moving_data(d, MOVING_BOXES)
        g = np.flatnonzero(d["graph"]) if len(d["graph"]) else []
        px_ms = (hi - lo) / (width_px or self.lod_px) / 1e6
        self.graph_source.data = spans(*(np.asarray(d[k])[g] for k in ("left", "right", "y")),
                                       gap=px_ms)
        # the first paint's names (BokehJS refits them on every zoom and at the real width)
        x0, x1 = self.figure.x_range.start, self.figure.x_range.end
        single = np.asarray(d["count"]) == 1          # a merged box's name is not all it holds
        names = self.decode(d)["name"] if len(d["left"]) else np.array([], object)
        self.labels_source.data = fit_labels(d["left"], d["right"], d["y"],
                                             np.where(single, names, ""), x0, x1, self.lod_px)
        s = self.steps_source.data
        self.step_labels_source.data = fit_labels(s["left"], s["right"], s["label_y"],
                                                  s["label"], x0, x1, self.lod_px)
        self.flows_source.data = self._flows(lo, hi)
        merged = boxes["count"].to_numpy() > 1
        self.stats = dict(events=int(boxes["count"].sum()), boxes=len(boxes),
                          merged_boxes=int(merged.sum()),
                          merged_events=int(boxes["count"].to_numpy()[merged].sum()),
                          pixel_ns=(hi - lo) / (width_px or self.lod_px))


    def decode(self, data: dict | None = None) -> dict:
        """The boxes' (default: those drawn) name, category and lane label as strings."""
        return decode(self.events_source.data if data is None else data,
                      self.names_source.data["name"], self._labels,
                      self.details_source.data["detail"])


def run_figure(run, **kw):
    """The timeline layout of one run (what ``Run.plot()`` shows)."""
    return Timeline(run, **kw).layout
