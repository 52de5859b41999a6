"""A long loop of runs (lab.explore) as one line that changes in place, and a line that
stays per finished step. In a kernel: one display updated in place (where it is, which
A/B, round, side, and the run's own phase from lab.progress), ending as its last text; on a
terminal: the step lines on stdout and the rest on stderr. While it is open, lab.progress
feeds its detail, so the runs add no output of their own (a panel's own progress callable
is left alone)."""
from __future__ import annotations

import sys

from nbtools.lab.progress_view import TextLine, in_kernel


class LiveLine:
    """One progress line that rewrites itself in place while explore runs (a kernel's
    display, or stderr on a terminal), fed by the lab's progress events."""

    def __init__(self, lab):
        self.lab, self.text, self.detail = lab, "", ""
        self.handle = None
        self._shows = None

    def __enter__(self):
        self._shows = self.lab.progress
        if self._shows is True:
            self.lab.progress = self._detail
        if in_kernel():
            from IPython.display import display
            self.handle = display(TextLine("explore: starting"), display_id=True)
        return self

    def __exit__(self, *exc):
        self.lab.progress = self._shows
        if self.handle is not None:
            self.handle.update(TextLine(self.text))
        return False

    def _detail(self, text: str) -> None:
        self.detail = text
        self._show()

    def say(self, text: str) -> None:
        """Where the loop is now (replaced by the next say)."""
        self.text, self.detail = text, ""
        if self.handle is None:
            print(text, file=sys.stderr, flush=True)
        self._show()

    def said(self, text: str) -> None:
        """A step that finished: a line that stays (none when the lab's progress is off)."""
        if self._shows is not False:
            print(text, flush=True)

    def _show(self) -> None:
        if self.handle is not None:
            self.handle.update(TextLine(self.text + (f" · {self.detail}" if self.detail else "")))
