"""ui: the per-rank summary under a timeline: each rank's profiled step as a stacked bar
(compute, exposed communication, idle, the rest of the step) with its numbers beside it,
read from run.summary (never computed here: one definition per metric)."""
from __future__ import annotations

import pandas as pd
from bokeh.models import ColumnDataSource, FixedTicker, Range1d
from bokeh.plotting import figure

from nbtools.ui.timeline.data import SUMMARY_STACK, summary_data
from nbtools.ui.timeline.interactions import CHAR_PX

ROW_PX = 30        # a rank's bar and its text: a one-rank strip is no 6-px sliver
CHROME_PX = 120    # the title, the legend above, the x axis and its label
AXIS_PX = 70       # the "rank 0" labels and the borders, left of and around the frame


class SummaryStrip:
    """One figure, a row per rank; built once, ``update`` replaces its data."""

    def __init__(self, size: dict, backend: str = "canvas"):
        self.source = ColumnDataSource(summary_data(pd.DataFrame(), []))
        # the narrowest this figure is drawn: the text beside the bars must fit there
        self.narrowest = int(size.get("width") or size.get("min_width") or 500)
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
        data = summary_data(summary, ranks)
        frame = self.narrowest - AXIS_PX
        data["text"] = [wrap(t, int(frame * 0.55 / CHAR_PX)) for t in data["text"]]
        self.source.data = data
        fig.visible = any(t for t in data["text"])   # nothing measured: no chart
        fig.x_range.end = text_room(data["text_x"], data["text"], frame)
        fig.title.text = f"per-rank summary · {head}"
        lines = max((t.count("\n") + 1 for t in data["text"]), default=1)
        fig.height = CHROME_PX + max(ROW_PX, 13 * lines + 8) * max(len(ranks), 1)
        fig.y_range.start = max(len(ranks), 1) - 0.5
        fig.yaxis.ticker.ticks = list(range(len(ranks)))
        fig.yaxis.major_label_overrides = {i: f"rank {r}" for i, r in enumerate(ranks)}


def text_room(ends, texts, frame_px: float) -> float:
    """The x range's end that leaves room on the right for each row's text beside its bar
    (``ends``: where the bars end, ms) in a frame ``frame_px`` wide: the text whole, not
    cut at the figure's edge ("...idle 0.606 r")."""
    end = max(max(ends, default=0.0), 1e-3) * 1.05
    for x, t in zip(ends, texts):
        need = (max(map(len, str(t).split("\n"))) * CHAR_PX + 6 + 12) / max(frame_px, 1.0)   # x_offset and a margin
        if x > 0 and need < 0.9:
            end = max(end, x / (1 - need))
        elif x > 0:
            end = max(end, 10 * x)
    return end


def wrap(text: str, chars: int) -> str:
    """``text`` broken at its " · " into lines of at most ``chars`` characters (a part
    longer than that keeps its line)."""
    lines: list = []
    for part in str(text).split(" · "):
        if lines and len(lines[-1]) + 3 + len(part) <= chars:
            lines[-1] += " · " + part
        else:
            lines.append(part)
    return "\n".join(lines)
