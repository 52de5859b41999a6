"""widgets: what the panel is doing, in one place, and where it says so.

While a run, a Compare, a Try or an Explore works, every button and picker that would start
other work is disabled, the reason on hover: a press then could only be refused (Suggest,
Explore and Export stayed enabled during Compare's rounds and did nothing). A call from
Python meanwhile is refused in words, beside that part's buttons. When the work ends each
comes back as its own rule says (Run: the config in the controls; Try: a suggestion to try).

Each part of the panel says things on its own line beside its buttons (``say``): a message
is read where the button was pressed (Export's error once appeared in the error box at the
panel's top, 1,600 px above the button)."""
from __future__ import annotations

import html
from typing import Optional

ERROR_STYLE = ("border:1px solid #d62728;background:#fdecea;color:#a40000;padding:4px 8px;"
               "margin:2px 0;white-space:pre-wrap;font-family:monospace;font-size:12px")


def say(where, text: str, error: bool = False) -> None:
    """Put ``text`` (plain words) on a part's own message line; ``error``: in the error
    style. Empty text clears it."""
    words = html.escape(text)
    where.value = (f"<div style='{ERROR_STYLE}'>{words}</div>" if error and text else words)


class Work:
    """The one piece of work the panel does at a time (``what``: "Run", "Compare", "Try",
    "Explore"; None when idle), and the widgets it holds still meanwhile."""

    def __init__(self, panel):
        self.panel = panel
        self.what: Optional[str] = None
        self._tips: dict = {}

    def widgets(self) -> list:
        """Everything that starts work or changes what the work is about: the actions'
        buttons, the pair to compare, the pickers the actions read."""
        p, a = self.panel, self.panel.advisor
        return [p.run_button, p.restart_button, p.history_list, p.load_button, p.compare_a,
                p.compare_b, p.compare_rounds, p.compare_button, a.suggest_button, a.pick,
                a.try_button, a.explore_button, a.rounds, a.budget, p.export_runs,
                p.export_replace, p.export_button, p.perfetto_button]

    def busy(self, where, action: str) -> bool:
        """True while other work runs, said on ``where`` (the pressed part's line): then
        ``action`` does nothing."""
        if self.what is None:
            return False
        say(where, f"{action}: not now, {self.what} is running (wait for it to end, or press "
                   "its Stop: the run in progress finishes first)", error=True)
        return True

    def begin(self, what: str) -> None:
        """``what`` starts: every other action is held until ``end``."""
        self.what = what
        for w in self.widgets():
            if w is not self.panel.run_button:          # (its tooltip is the Guard's)
                self._tips.setdefault(id(w), getattr(w, "tooltip", None))
                w.tooltip = f"{what} is running: this waits until it ends"
            w.disabled = True

    def end(self) -> None:
        """The work ended: every action as its own rule says."""
        self.what = None
        p, a = self.panel, self.panel.advisor
        for w in self.widgets():
            if id(w) in self._tips:
                w.tooltip = self._tips.pop(id(w))
            w.disabled = False
        p.run_button.disabled = bool(p.guard.reason)
        a.try_button.disabled = not a.suggestions
