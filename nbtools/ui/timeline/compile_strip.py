"""ui: the compile strip: every step of every rank (warm-up, measured, profiled) and every
compile, recompile, graph break and CUDA-graph skip, on its own time axis (seconds since the
run's first step), so compiles that happen long before the profiled window are in view
without zooming. Where a long compile would squeeze the steps to a pixel, the axis is cut
(``broken_axis``: the inside of the compile drawn narrow, shaded and labelled with the time
it stands for). Events recorded without a time are listed under it, never drawn at a
made-up place on the axis. A field the recorder left empty says why ("first compile of
this frame", "not recorded"), never a blank."""
from __future__ import annotations

import html

import numpy as np
import pandas as pd
from bokeh.models import (ColumnDataSource, CustomJSTickFormatter, Div, FixedTicker, HoverTool,
                          Range1d)
from bokeh.plotting import figure

from nbtools.ui.timeline.broken_axis import TICKS_JS, cuts, knots, to_axis
from nbtools.ui.timeline.data import COMPILE_STYLE, fmt_ns
from nbtools.ui.timeline.interactions import only_if_none

PHASE_COLOUR = {"warmup": "#fdd0a2", "measured": "#c6dbef", "profiled": "#6baed6"}
UNTIMED = "(counted only)"     # counter-only records: how many, not when
NOT_RECORDED = "not recorded"
FIRST = {"compile": "first compile of this frame (no guard had failed)",
         "backward_compile": "the backward of a compiled frame"}


def filled(values, default) -> np.ndarray:
    """Strings with the empty ones (and "nan", "None") replaced: per row ``default(i)``."""
    out = np.asarray([str(v) for v in values], object)
    for i in np.flatnonzero(np.isin(out, ("", "nan", "None", "<NA>"))).tolist():
        out[i] = default(i)
    return out


def untimed(ce: pd.DataFrame) -> np.ndarray:
    """Compile events with no time of their own (counted from counters at the run's end)."""
    if not len(ce):
        return np.zeros(0, bool)
    return (ce["ts_ns"].to_numpy(np.int64) <= 0) | (ce["reason"].astype(str) == UNTIMED).to_numpy()


def strip_origin(run) -> int:
    """The compile strip's time zero: the first step or timed compile event of the run (ns)."""
    frames = [df for df in (run.steps, run.compile_events[~untimed(run.compile_events)])
              if len(df)]
    return min(int(df["ts_ns"].min()) for df in frames) if frames else 0


def strip_data(run, ranks: list) -> tuple[dict, dict, dict, str, dict]:
    """(steps, compile spans, compile markers) sources for the ranks' rows, the html
    listing the events with no time, and the axis (knots real -> axis, and its cuts)."""
    t0 = strip_origin(run)
    row = {r: i for i, r in enumerate(ranks)}
    st = run.steps[run.steps["rank"].isin(ranks)] if len(run.steps) else run.steps
    ts = st["ts_ns"].to_numpy(np.int64) if len(st) else np.zeros(0, np.int64)
    dur = st["dur_ns"].to_numpy(np.int64) if len(st) else np.zeros(0, np.int64)
    ce = run.compile_events
    ce = ce[ce["rank"].isin(ranks)] if len(ce) else ce
    none = untimed(ce)
    timed, lost = ce[~none], ce[none]
    cts = timed["ts_ns"].to_numpy(np.int64)
    cdur = timed["dur_ns"].to_numpy(np.int64)
    s0, s1 = (ts - t0) / 1e9, (ts + dur - t0) / 1e9
    c0, c1 = (cts - t0) / 1e9, (cts + cdur - t0) / 1e9
    real, axis = knots(np.r_[s0, s1, c0, c1], dur / 1e9)
    x = lambda v: to_axis(v, real, axis)               # noqa: E731
    phase = st["phase"].astype(str).to_numpy(object) if len(st) else np.zeros(0, object)
    sy = np.array([row[int(r)] for r in st["rank"]], float) if len(st) else np.zeros(0)
    steps = dict(left=x(s0), right=x(s1), bottom=sy + 0.4, top=sy - 0.4,
                 color=np.array([PHASE_COLOUR.get(p, "#dddddd") for p in phase], object),
                 step=st["step"].to_numpy(np.int32) if len(st) else [],
                 phase=phase, dur=np.asarray(fmt_ns(dur), object),
                 rank=st["rank"].to_numpy(np.int32) if len(st) else [],
                 at=np.asarray([f"{v:,.3f} s" for v in s0.tolist()], object))
    kind = timed["kind"].astype(str).to_numpy(object)
    style = [COMPILE_STYLE.get(k, ("circle", "#7f7f7f")) for k in kind]
    y = np.array([row[int(r)] for r in timed["rank"]], float) - 0.22
    marks = dict(x=x(c0), end=x(c1), y=y,
                 marker=np.array([m for m, _ in style], object),
                 color=np.array([c for _, c in style], object), kind=kind,
                 name=timed["name"].astype(str).to_numpy(object),
                 frame=filled(timed["frame"], lambda i: NOT_RECORDED),
                 reason=filled(timed["reason"], lambda i: FIRST.get(kind[i], NOT_RECORDED)),
                 dur=np.asarray([d if n > 0 else "an instant" for d, n in
                                 zip(fmt_ns(cdur), cdur.tolist())], object),
                 step=timed["step"].to_numpy(np.int32),
                 rank=timed["rank"].to_numpy(np.int32),
                 cache=filled(timed["cache"], lambda i: NOT_RECORDED if "compile" in kind[i]
                              else "does not apply"),
                 at=np.asarray([f"{v:,.3f} s" for v in c0.tolist()], object))
    has = cdur > 0
    spans = {k: np.asarray(v)[has] for k, v in marks.items()}
    note = ""
    if len(lost):
        counts = lost.groupby(["rank", "kind"], observed=True).size()
        note = ("<span style='font-size:11px;color:#555'>Recorded without a time (counted at the "
                "run's end, so not drawn on the axis): " + "; ".join(
                    f"rank {r}: {n} {html.escape(str(k))}" for (r, k), n in counts.items())
                + "</span>")
    return steps, spans, marks, note, dict(real=real, axis=axis, cuts=cuts(real, axis))


class CompileStrip:
    """One figure, rows per rank; built once, ``update`` replaces its data."""

    def __init__(self, size: dict, backend: str = "canvas"):
        steps, spans, marks, _, ax = strip_data(_Empty(), [])
        self.steps_source = ColumnDataSource(steps)
        self.span_source = ColumnDataSource(spans)
        self.mark_source = ColumnDataSource(marks)
        self.cut_source = ColumnDataSource(dict(ax["cuts"], y=np.zeros(0)))
        self.knots = ColumnDataSource(dict(real=ax["real"], axis=ax["axis"]))
        fig = figure(height=120, output_backend=backend, **size, name="compile-strip",
                     title="compile · every step and compile event of each rank",
                     x_range=Range1d(0, 1), y_range=Range1d(0.5, -0.5),
                     tools="xpan,xwheel_zoom,reset", active_scroll=None,
                     toolbar_location="above", x_axis_label="s since the run's first step")
        fig.ygrid.grid_line_color = None
        fig.yaxis.ticker = FixedTicker(ticks=[])
        # real seconds under a cut axis; a few ms of steps read 0.001, not 1.000e-3
        self._ticks = CustomJSTickFormatter(args=dict(real=[0.0, 1.0], axis=[0.0, 1.0]),
                                            code=TICKS_JS)
        fig.xaxis.formatter = self._ticks
        r_st = fig.quad(left="left", right="right", bottom="bottom", top="top", fill_color="color",
                        line_color="#ffffff", line_width=0.5, source=self.steps_source,
                        name="compile-strip-steps")
        r_sp = fig.hbar(y="y", left="x", right="end", height=0.3, fill_color="color",
                        fill_alpha=0.45, line_color="color", source=self.span_source,
                        name="compile-strip-spans")
        r_mk = fig.scatter(x="x", y="y", marker="marker", size=11, fill_color="color",
                           line_color="#333333", line_width=0.5, source=self.mark_source,
                           name="compile-strip-marks")
        # a cut: the stretch drawn narrow, shaded, and the time it stands for above it
        fig.quad(left="left", right="right", bottom=-1e3, top=1e3, fill_color="#000000",
                 fill_alpha=0.07, hatch_pattern="\\", hatch_color="#888888", hatch_alpha=0.5,
                 hatch_scale=8, line_color=None, source=self.cut_source, name="compile-strip-cuts")
        fig.text(x="left", y="y", text="text", text_font_size="8pt", text_color="#222",
                 background_fill_color="#ffffff", background_fill_alpha=0.8,
                 text_baseline="top", x_offset=2, source=self.cut_source,
                 name="compile-strip-cut-labels")
        tips = [("", "@kind @name"), ("frame", "@frame"), ("reason", "@reason"),
                ("rank", "@rank"), ("step", "@step"), ("at", "@at"), ("duration", "@dur"),
                ("cache", "@cache")]
        # one tooltip at a time: a marker over its span over its step (tools in that order)
        fig.add_tools(HoverTool(renderers=[r_mk], tooltips=tips),
                      HoverTool(renderers=[r_sp], tooltips=tips,
                                filters={"@kind": only_if_none(self.mark_source, r_mk)}),
                      HoverTool(renderers=[r_st], tooltips=[("", "step @step (@phase)"),
                                                            ("rank", "@rank"), ("at", "@at"),
                                                            ("duration", "@dur")],
                                filters={"@step": only_if_none(self.mark_source, r_mk,
                                                               self.span_source, r_sp)}))
        self.figure = fig
        self.untimed = Div(text="", name="compile-untimed", **size)

    def update(self, run, ranks: list) -> None:
        """Redraw the strip for ``run``'s ``ranks``: steps, compile spans, marks and axis cuts."""
        steps, spans, marks, note, ax = strip_data(run, ranks)
        self.steps_source.data, self.span_source.data = steps, spans
        self.mark_source.data = marks
        self.knots.data = dict(real=ax["real"], axis=ax["axis"])
        self._ticks.args = dict(real=ax["real"].tolist(), axis=ax["axis"].tolist())
        self.cut_source.data = dict(ax["cuts"], y=np.full(len(ax["cuts"]["left"]), -0.5))
        self.untimed.text = note
        fig = self.figure
        fig.visible = bool(len(steps["left"]) or len(marks["x"]))   # nothing: the notice says
        n = max(len(ranks), 1)
        fig.height = 90 + 26 * n
        fig.y_range.start, fig.y_range.end = n - 0.5, -0.5
        fig.yaxis.ticker.ticks = list(range(len(ranks)))
        fig.yaxis.major_label_overrides = {i: f"rank {r}" for i, r in enumerate(ranks)}
        ends = np.r_[np.asarray(steps["right"], float), np.asarray(marks["end"], float),
                     np.asarray(marks["x"], float)]
        hi = float(ends.max()) if len(ends) else 1.0
        n_cut = len(ax["cuts"]["left"])
        fig.xaxis.axis_label = "s since the run's first step" + (
            f" · {n_cut} stretch{'es' if n_cut > 1 else ''} with nothing starting or ending "
            "drawn narrow (shaded, labelled with its real length)" if n_cut else "")
        pad = max(hi * 0.02, 1e-4)
        fig.x_range.start, fig.x_range.end = -pad, hi + pad
        fig.x_range.reset_start, fig.x_range.reset_end = -pad, hi + pad


class _Empty:
    """A run with no rows, for the sources' first (empty) columns."""
    from nbtools.schema import tables as _t
    steps = _t.empty(_t.STEP_COLUMNS)
    compile_events = _t.empty(_t.COMPILE_COLUMNS)
