"""ui: the per-rank summary under a timeline: each rank's profiled step as a stacked bar
(compute, exposed communication, idle, the rest of the step) with its numbers beside it,
read from run.summary (never computed here: one definition per metric)."""
from __future__ import annotations

import pandas as pd
from bokeh.models import ColumnDataSource, FixedTicker, Range1d
from bokeh.plotting import figure

from nbtools.ui.timeline.data import SUMMARY_STACK, summary_data


class SummaryStrip:
    """One figure, a row per rank; built once, ``update`` replaces its data."""

    def __init__(self, size: dict, backend: str = "canvas"):
        self.source = ColumnDataSource(summary_data(pd.DataFrame(), []))
        fig = figure(height=90, output_backend=backend, **size,
                     y_range=Range1d(0.5, -0.5), name="summary", x_range=Range1d(0, 1),
                     x_axis_label="ms per profiled step (run.summary: profiled_window_ms, its parts)",
                     toolbar_location=None, tools="")
        fig.ygrid.grid_line_color = None
        fig.yaxis.ticker = FixedTicker(ticks=[])
        fields = [f for f, _, _ in SUMMARY_STACK]
        fig.hbar_stack(fields, y="y", height=0.7, color=[c for _, _, c in SUMMARY_STACK],
                       legend_label=[lab for _, lab, _ in SUMMARY_STACK], source=self.source)
        fig.text(x="text_x", y="y", text="text", text_font_size="8pt", text_baseline="middle",
                 x_offset=6, source=self.source)
        legend = fig.legend[0]
        legend.orientation, legend.label_text_font_size = "horizontal", "8pt"
        legend.padding = legend.margin = 2
        fig.add_layout(legend, "above")
        self.figure = fig

    def update(self, summary: pd.DataFrame, ranks: list, head: str) -> None:
        """Redraw the per-rank bars and their text for ``ranks``; hidden when nothing was measured."""
        fig = self.figure
        self.source.data = data = summary_data(summary, ranks)
        fig.visible = any(t for t in data["text"])   # nothing measured: no chart
        # room on the right for the text beside the longest bar
        fig.x_range.end = 1.8 * max(max(data["text_x"], default=0.0), 1e-3)
        fig.title.text = f"per-rank summary · {head}"
        fig.height = 85 + 24 * max(len(ranks), 1)
        fig.y_range.start = max(len(ranks), 1) - 0.5
        fig.yaxis.ticker.ticks = list(range(len(ranks)))
        fig.yaxis.major_label_overrides = {i: f"rank {r}" for i, r in enumerate(ranks)}
