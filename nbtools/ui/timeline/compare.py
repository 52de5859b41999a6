"""Two runs' timelines stacked on one x axis, plus the change in time per category."""
from __future__ import annotations

import numpy as np
from bokeh.layouts import column
from bokeh.models import ColumnDataSource, HoverTool, Range1d
from bokeh.plotting import figure

from nbtools.schema.tables import CATEGORIES
from nbtools.results.comparison import category_ms   # the compare table and the delta chart: one number
from nbtools.ui.timeline.data import first_profiled_ns
from nbtools.ui.timeline.figure import Timeline


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
    a.swap_on(b.figure)       # a wheel over one moves both
    b.swap_on(a.figure)
    # Each update set the shared range to its own window; show both.
    shared.start = shared.reset_start = min(a.window_ms[0], b.window_ms[0])
    shared.end = shared.reset_end = max(a.window_ms[1], b.window_ms[1])
    ca, cb = category_ms(run_a), category_ms(run_b)
    cats = [c for c in CATEGORIES if c in ca.index or c in cb.index] + \
        sorted((set(ca.index) | set(cb.index)) - set(CATEGORIES))
    va = np.array([float(ca.get(c, 0.0)) for c in cats])
    vb = np.array([float(cb.get(c, 0.0)) for c in cats])
    delta = vb - va
    # one neutral colour, not red/green: a category's delta of two runs' profiled steps has
    # no interval, and red or green reads as a verdict (the comparison's table has that)
    src = ColumnDataSource(dict(category=cats, a=va, b=vb, delta=delta,
                                color=np.full(len(cats), "#6b8cae", dtype=object)))
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
