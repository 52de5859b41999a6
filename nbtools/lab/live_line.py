"""A long loop of runs (lab.explore) as one line that changes in place, and a line that
stays per finished step. In a kernel: one display updated in place (where it is, which
A/B, round, side, and the run's own phase from lab.progress), ending as its last text; on a
terminal: the step lines on stdout and the rest as the one progress line on stderr,
rewritten in place (nothing when stderr is a file or a pipe). While it is open,
lab.progress feeds its detail, so the runs add no output of their own (a panel's own
progress callable is left alone). ``Lab(echo=False)`` or ``lab.progress = False``: silent."""
from __future__ import annotations

from nbtools.lab.progress_view import TerminalLine, TextLine, clear_line, in_kernel


class LiveLine:
    """One progress line that rewrites itself in place while explore runs (a kernel's
    display, or the terminal's progress line), fed by the lab's progress events."""

    def __init__(self, lab):
        self.lab, self.text, self.detail = lab, "", ""
        self.handle = self.line = None
        self._shows = None
        self.quiet = False

    def __enter__(self):
        self._shows = self.lab.progress
        self.quiet = self._shows is False or not getattr(self.lab, "echo", True)
        if self._shows is True:
            self.lab.progress = self._detail
        if self.quiet:
            return self
        if in_kernel():
            from IPython.display import display
            self.handle = display(TextLine("explore: starting"), display_id=True)
        else:
            self.line = TerminalLine()
        return self

    def __exit__(self, *exc):
        self.lab.progress = self._shows
        if self.handle is not None:
            self.handle.update(TextLine(self.text))
        if self.line is not None:
            self.line.clear()
        return False

    def _detail(self, text: str) -> None:
        self.detail = text
        self._show()

    def say(self, text: str) -> None:
        """Where the loop is now (replaced by the next say)."""
        self.text, self.detail = text, ""
        self._show()

    def said(self, text: str) -> None:
        """A step that finished: a line that stays (none when the lab is quiet)."""
        if not self.quiet:
            clear_line()          # the progress line makes way for it
            print(text, flush=True)

    def _show(self) -> None:
        shown = self.text + (f" · {self.detail}" if self.detail else "")
        if self.handle is not None:
            self.handle.update(TextLine(shown))
        elif self.line is not None:
            self.line.show(shown)
