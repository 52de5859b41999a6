"""A run's progress as widgets: a bar and a line per rank under a header, updated in place
while Lab.run waits, and replaced by the run's one summary line when it ends (so a saved
notebook keeps no stale bar). The lab decides when (nbtools/lab/progress_view.py); this
draws it."""
from __future__ import annotations

import ipywidgets as W
from IPython.display import display

from nbtools.schema.progress import PHASES
from nbtools.lab.progress_view import TextLine, Tracker, position


class ProgressBars:
    """A run's progress as widgets: a head line and one bar and label per rank."""
    def __init__(self, tracker: Tracker, run_id: str):
        self.tracker, self.run_id = tracker, run_id
        self.head = W.HTML(f"<b>run {run_id}</b>: start")
        self.bars = {r: W.IntProgress(value=0, min=0, max=100 * (len(PHASES) - 1),
                                      layout=W.Layout(width="220px"))
                     for r in tracker.ranks}
        self.labels = {r: W.Label(tracker.rank_text(r)) for r in tracker.ranks}
        self.widget = W.VBox([self.head] + [W.HBox([self.bars[r], self.labels[r]])
                                            for r in tracker.ranks])
        self.widget.add_class("nbtools-progress")
        self.handle = display(self.widget, display_id=True)

    def update(self, now: float) -> None:
        """Move every rank's bar and label to its state now."""
        self.head.value = (f"<b>run {self.run_id}</b>: {self.tracker.phase()} · "
                           f"{now - self.tracker.t0:.0f} s")
        for r in self.tracker.ranks:
            # phases, and steps inside a phase as a fraction of one
            self.bars[r].value = int(100 * position(self.tracker.state[r]))
            self.labels[r].value = self.tracker.rank_text(r, now)

    def close(self, line: str) -> None:
        """Replace the bars with the run's last ``line``, and close every widget they were
        made of (closing the box alone left its bars, labels, layouts and styles open:
        about 20 per run that every new tab of the notebook restored)."""
        if self.handle is not None:      # None outside a kernel: nothing was shown
            self.handle.update(TextLine(line))
        close_all(self.widget)


def close_all(widget) -> None:
    """``widget``, its children and their layouts and styles, closed."""
    for child in getattr(widget, "children", ()):
        close_all(child)
    for part in (getattr(widget, "layout", None), getattr(widget, "style", None)):
        if isinstance(part, W.Widget):
            part.close()
    widget.close()
