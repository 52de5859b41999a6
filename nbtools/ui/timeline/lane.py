"""ui: what every lane under the timeline's streams shares (memory, GPU waits, machine
signals): a figure with one labelled row per rank (or per rank and signal), on the
timeline's x range while it has rows to show, hidden otherwise."""
from __future__ import annotations

from bokeh.models import FixedTicker, Range1d
from bokeh.plotting import figure


class Lane:
    """``figure``: the lane's Bokeh figure, built once; ``show_rows`` after each data swap."""

    def __init__(self, size: dict, backend: str, x_range, *, name: str, title: str,
                 height: int, **fig_kw):
        # Hidden, a lane keeps a range of its own: on the timeline's, BokehJS re-measured the
        # hidden figure's layout on every wheel tick (10 to 30 ms a tick at 1M events)
        self._shared, self._own = x_range, Range1d(0, 1)
        fig = figure(height=height, output_backend=backend, **size, x_range=self._own,
                     y_range=Range1d(0.5, -0.5), name=name, title=title, tools="xpan,reset",
                     toolbar_location=None, **fig_kw)
        fig.ygrid.grid_line_color = None
        fig.yaxis.ticker = FixedTicker(ticks=[])
        fig.yaxis.major_label_text_font_size = "8pt"
        fig.visible = False
        self.figure = fig

    def show_rows(self, labels: dict, rows: int, row_px: int) -> None:
        """Show ``rows`` rows labelled by ``labels`` ({row: text}), ``row_px`` each; hidden
        and off the shared x range when there are no labels."""
        fig = self.figure
        fig.visible = bool(labels)
        fig.x_range = self._shared if labels else self._own
        n = max(rows, 1)
        fig.height = 70 + row_px * n
        fig.y_range.start, fig.y_range.end = n - 0.5, -0.5
        fig.yaxis.ticker.ticks = sorted(labels)
        fig.yaxis.major_label_overrides = labels
