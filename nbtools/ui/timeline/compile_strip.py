"""ui: the compile strip: every step of every rank (warm-up, measured, profiled) and every
compile, recompile, graph break and CUDA-graph skip, on its own time axis (seconds since the
run's first step), so compiles that happen long before the profiled window are in view
without zooming. Events recorded without a time are listed under it, never drawn at a
made-up place on the axis."""
from __future__ import annotations

import numpy as np
import pandas as pd
from bokeh.models import BasicTickFormatter, ColumnDataSource, Div, FixedTicker, HoverTool, Range1d
from bokeh.plotting import figure

from nbtools.ui.timeline.data import COMPILE_STYLE, fmt_ns

PHASE_COLOUR = {"warmup": "#fdd0a2", "measured": "#c6dbef", "profiled": "#6baed6"}
UNTIMED = "(counted only)"     # counter-only records: how many, not when


def untimed(ce: pd.DataFrame) -> np.ndarray:
    """Compile events with no time of their own (counted from counters at the run's end)."""
    if not len(ce):
        return np.zeros(0, bool)
    return (ce["ts_ns"].to_numpy(np.int64) <= 0) | (ce["reason"].astype(str) == UNTIMED).to_numpy()


def strip_origin(run) -> int:
    frames = [df for df in (run.steps, run.compile_events[~untimed(run.compile_events)])
              if len(df)]
    return min(int(df["ts_ns"].min()) for df in frames) if frames else 0


def strip_data(run, ranks: list) -> tuple[dict, dict, dict, str]:
    """(steps, compile spans, compile markers) sources for the ranks' rows, and the html
    listing the events with no time."""
    t0 = strip_origin(run)
    row = {r: i for i, r in enumerate(ranks)}
    st = run.steps[run.steps["rank"].isin(ranks)] if len(run.steps) else run.steps
    ts = st["ts_ns"].to_numpy(np.int64) if len(st) else np.zeros(0, np.int64)
    dur = st["dur_ns"].to_numpy(np.int64) if len(st) else np.zeros(0, np.int64)
    phase = st["phase"].astype(str).to_numpy(object) if len(st) else np.zeros(0, object)
    sy = np.array([row[int(r)] for r in st["rank"]], float) if len(st) else np.zeros(0)
    steps = dict(left=(ts - t0) / 1e9, right=(ts + dur - t0) / 1e9, bottom=sy + 0.4,
                 top=sy - 0.4,
                 color=np.array([PHASE_COLOUR.get(p, "#dddddd") for p in phase], object),
                 step=st["step"].to_numpy(np.int32) if len(st) else [],
                 phase=phase, dur=np.asarray(fmt_ns(dur), object),
                 rank=st["rank"].to_numpy(np.int32) if len(st) else [])
    ce = run.compile_events
    ce = ce[ce["rank"].isin(ranks)] if len(ce) else ce
    none = untimed(ce)
    timed, lost = ce[~none], ce[none]
    ts = timed["ts_ns"].to_numpy(np.int64)
    dur = timed["dur_ns"].to_numpy(np.int64)
    kind = timed["kind"].astype(str).to_numpy(object)
    style = [COMPILE_STYLE.get(k, ("circle", "#7f7f7f")) for k in kind]
    y = np.array([row[int(r)] for r in timed["rank"]], float) - 0.22
    marks = dict(x=(ts - t0) / 1e9, end=(ts + dur - t0) / 1e9, y=y,
                 marker=np.array([m for m, _ in style], object),
                 color=np.array([c for _, c in style], object), kind=kind,
                 name=timed["name"].astype(str).to_numpy(object),
                 frame=timed["frame"].astype(str).to_numpy(object),
                 reason=timed["reason"].astype(str).to_numpy(object),
                 dur=np.asarray(fmt_ns(dur), object), step=timed["step"].to_numpy(np.int32),
                 rank=timed["rank"].to_numpy(np.int32),
                 cache=timed["cache"].astype(str).to_numpy(object),
                 at=np.asarray([f"{v:,.3f} s" for v in ((ts - t0) / 1e9).tolist()], object))
    has = dur > 0
    spans = {k: np.asarray(v)[has] for k, v in marks.items()}
    html = ""
    if len(lost):
        counts = lost.groupby(["rank", "kind"], observed=True).size()
        html = ("<span style='font-size:11px;color:#555'>Recorded without a time (counted at the "
                "run's end, so not drawn on the axis): " + "; ".join(
                    f"rank {r}: {n} {k}" for (r, k), n in counts.items()) + "</span>")
    return steps, spans, marks, html


class CompileStrip:
    """One figure, rows per rank; built once, ``update`` replaces its data."""

    def __init__(self, size: dict, backend: str = "canvas"):
        steps, spans, marks, _ = strip_data(_Empty(), [])
        self.steps_source = ColumnDataSource(steps)
        self.span_source = ColumnDataSource(spans)
        self.mark_source = ColumnDataSource(marks)
        fig = figure(height=120, output_backend=backend, **size, name="compile-strip",
                     title="compile · every step and compile event of each rank",
                     x_range=Range1d(0, 1), y_range=Range1d(0.5, -0.5),
                     tools="xpan,xwheel_zoom,reset", active_scroll=None,
                     toolbar_location="above", x_axis_label="s since the run's first step")
        fig.ygrid.grid_line_color = None
        fig.yaxis.ticker = FixedTicker(ticks=[])
        # a few ms of steps (a trace with no compiles) read 0.001, not 1.000e-3
        fig.xaxis.formatter = BasicTickFormatter(use_scientific=False)
        r_st = fig.quad(left="left", right="right", bottom="bottom", top="top", fill_color="color",
                        line_color="#ffffff", line_width=0.5, source=self.steps_source,
                        name="compile-strip-steps")
        r_sp = fig.hbar(y="y", left="x", right="end", height=0.3, fill_color="color",
                        fill_alpha=0.45, line_color="color", source=self.span_source,
                        name="compile-strip-spans")
        r_mk = fig.scatter(x="x", y="y", marker="marker", size=11, fill_color="color",
                           line_color="#333333", line_width=0.5, source=self.mark_source,
                           name="compile-strip-marks")
        tips = [("", "@kind @name"), ("frame", "@frame"), ("reason", "@reason"),
                ("rank", "@rank"), ("step", "@step"), ("at", "@at"), ("duration", "@dur"),
                ("cache", "@cache")]
        fig.add_tools(HoverTool(renderers=[r_mk, r_sp], tooltips=tips),
                      HoverTool(renderers=[r_st], tooltips=[("", "step @step (@phase)"),
                                                            ("rank", "@rank"),
                                                            ("duration", "@dur")]))
        self.figure = fig
        self.untimed = Div(text="", name="compile-untimed", **size)

    def update(self, run, ranks: list) -> None:
        steps, spans, marks, html = strip_data(run, ranks)
        self.steps_source.data, self.span_source.data = steps, spans
        self.mark_source.data = marks
        self.untimed.text = html
        fig = self.figure
        n = max(len(ranks), 1)
        fig.height = 90 + 26 * n
        fig.y_range.start, fig.y_range.end = n - 0.5, -0.5
        fig.yaxis.ticker.ticks = list(range(len(ranks)))
        fig.yaxis.major_label_overrides = {i: f"rank {r}" for i, r in enumerate(ranks)}
        ends = np.r_[np.asarray(steps["right"], float), np.asarray(marks["end"], float),
                     np.asarray(marks["x"], float)]
        hi = float(ends.max()) if len(ends) else 1.0
        pad = max(hi * 0.02, 1e-4)
        fig.x_range.start, fig.x_range.end = -pad, hi + pad
        fig.x_range.reset_start, fig.x_range.reset_end = -pad, hi + pad


class _Empty:
    """A run with no rows, for the sources' first (empty) columns."""
    from nbtools.analysis import tables as _t
    steps = _t.empty(_t.STEP_COLUMNS)
    compile_events = _t.empty(_t.COMPILE_COLUMNS)
