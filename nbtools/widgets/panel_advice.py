"""widgets: the panel's advice. Suggest lists lab.advise of the run on screen with its
evidence; Try runs the chosen suggestion as an A/B (lab.ab) of that run's config against
it with the change; Explore runs lab.explore from that config with a table that grows as
each A/B finishes. Try and Explore run in a background thread, as Compare does, with
their progress, a Stop button, and everything they write kept in the panel
(thread_output): nothing reaches the notebook or JupyterLab's Log Console."""
from __future__ import annotations

import html
import threading
import time
from typing import Optional

import ipywidgets as W

from nbtools.results.exploration import Exploration, change_text
from nbtools.ui.exploration import exploration_html, exploration_lines, steps_html
from nbtools.ui.html import comparison_html
from nbtools.ui.summary_view import comparison_lines
from nbtools.widgets.panel_parts import Ticker, button, html_widget
from nbtools.widgets.panel_work import ERROR_STYLE, say
from nbtools.widgets.thread_output import Stoppable, captured

ROUND_CHOICES = ("auto", 2, 3, 5, 8, 12)
"""Rounds per A/B in Try and Explore: "auto" (the default) runs as many as it takes."""


class Advisor(Stoppable):
    """Suggest / Try / Explore with their widgets (``box`` is what the panel shows)."""

    def __init__(self, panel):
        self.panel = panel
        self.suggestions: list = []
        self.suggest_button = button("Suggest", self.suggest, "nbtools-suggest",
                                      icon="lightbulb-o")
        self.pick = W.Dropdown(options=[], description="suggestion",
                               layout=W.Layout(width="520px"))
        self.pick.add_class("nbtools-suggestion")
        self.try_button = button("Try", lambda: self.try_(wait=False), "nbtools-try",
                                  icon="flask", disabled=True)
        self.explore_button = button("Explore", lambda: self.explore(wait=False),
                                      "nbtools-explore", icon="search")
        # "auto": as many rounds as it takes, ending when the verdict is resolved or says no
        # difference bigger than 2 % (lab.ab's equivalence bound)
        self.rounds = W.Dropdown(options=ROUND_CHOICES, value="auto", description="rounds",
                                 layout=W.Layout(width="150px"))
        self.budget = W.BoundedIntText(value=600, min=1, max=86_400, description="budget s",
                                       layout=W.Layout(width="160px"))
        self.rounds.add_class("nbtools-advice-rounds")
        self.budget.add_class("nbtools-advice-budget")
        self.stop_button = button("Stop", self.stop, "nbtools-advice-stop", icon="stop",
                                   button_style="danger",
                                   layout=W.Layout(width="auto", display="none"))
        self.progress = html_widget("", "nbtools-advice-status")
        self.advice = html_widget("", "nbtools-advice")
        self.table = html_widget("", "nbtools-explore-table")
        self.result = html_widget("", "nbtools-advice-result")
        self.box = W.VBox([
            W.HBox([self.suggest_button, self.pick, self.try_button]),
            W.HBox([self.explore_button, self.rounds, self.budget, self.stop_button,
                    self.progress]),
            self.advice, self.table, self.result])
        self.thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self.exploration: Optional[Exploration] = None
        self.comparison = None
        self.shown = None          # what ``result`` shows: a Try's Comparison or an Exploration

    # -- Suggest ---------------------------------------------------------------------------
    def suggest(self):
        """lab.advise of the run on screen: the table (evidence, why, code) and the picker
        of those that change a field (Try runs one). Returns the Suggestions."""
        p = self.panel
        if p.work.busy(self.progress, "Suggest"):
            return None
        if p.shown is None:
            say(self.progress, "Suggest reads the run on screen: run this config or pick a run "
                "in the history first", error=True)
            return None
        self.progress.value = ""
        advice = p.lab.advise(p.shown)
        self.suggestions = [s for s in advice if s.change]
        self.pick.options = [(f"{s.rank}. {s.title} ({change_text(s.change)})", i)
                             for i, s in enumerate(self.suggestions)]
        self.pick.value = 0 if self.suggestions else None     # the first: the best ranked
        self.try_button.disabled = not self.suggestions
        # the reading before the moves, as a colleague would say it (run.why())
        self.advice.value = (f"<p><b>why run #{html.escape(p.shown.run_id)} takes its time"
                             f"</b></p>" + p.shown.why()._repr_html_()
                             + f"<p><b>advice</b> ({len(advice)}; Try runs one that changes a "
                             "field)</p>" + advice._repr_html_())
        return advice

    # -- Try and Explore (in a thread) -------------------------------------------------------
    def try_(self, wait: bool = True):
        """The chosen suggestion as an A/B: the shown run's config (A) against it with the
        change (B), ``rounds`` rounds. Returns the Comparison when ``wait``."""
        p = self.panel
        if p.work.busy(self.progress, "Try"):
            return None
        if p.shown is None or self.pick.value is None:
            say(self.progress, "Try runs a suggestion: press Suggest first (it reads the run "
                "on screen)", error=True)
            return None
        s = self.suggestions[self.pick.value]
        cfg = p.shown.config
        a, b = self._side(cfg), self._side(cfg.replace(**s.change))
        rounds = self.rounds.value

        def work(tick):
            def on_run(ev):
                tick.text = (f"Try {change_text(s.change)}: round {ev['round']} of "
                             f"{ev['rounds']} · {ev['side']} (run {ev['index']} of {ev['of']})")
                if ev["run"] is not None:
                    p.mine.append(ev["run"].run_id)
            cmp = p.lab.ab(a, b, rounds=rounds, on_run=on_run, stop=self._stop)
            self.comparison = p.comparison = self.shown = cmp
            self.result.value = (f"<p><b>Try {html.escape(change_text(s.change))}</b> "
                                 f"({html.escape(s.title)})</p>" + comparison_html(cmp))
            return cmp
        return self._start("Try", work, wait)

    def explore(self, wait: bool = True):
        """lab.explore from the shown run's config (or the controls' when none is shown),
        ``rounds`` a side per A/B, within ``budget`` seconds; the table grows per A/B.
        Returns the Exploration when ``wait``."""
        p = self.panel
        if p.work.busy(self.progress, "Explore"):
            return None
        cfg = p.shown.config if p.shown is not None and p.shown.config is not None \
            else p.config()
        target = p.step_fn if p.step_fn is not None else cfg
        start = cfg if p.step_fn is not None else None
        rounds, budget = self.rounds.value, self.budget.value
        self.table.value = ""

        def work(tick):
            rows, t0 = [], time.perf_counter()

            def on_step(row):
                rows.append(row)
                self.table.value = steps_html(_Rows(rows))

            def on_run(ev):
                left = max(budget - (time.perf_counter() - t0), 0)
                tick.text = (f"Explore, {'screen' if ev.get('screen') else 'A/B'} of "
                             f"{change_text(ev['change'])}: round {ev['round']} of "
                             f"{ev['rounds']} · {ev['side']} (run {ev['index']} of {ev['of']})"
                             f" · {left:.0f} s of the {budget} s budget left")
                if ev["run"] is not None:
                    p.mine.append(ev["run"].run_id)
            ex = p.lab.explore(target, start, budget_s=budget, rounds=rounds,
                               on_step=on_step, on_run=on_run, stop=self._stop)
            self.exploration = p.exploration = self.shown = ex
            self.table.value = ""
            self.result.value = exploration_html(ex)
            return ex
        return self._start("Explore", work, wait)

    def _side(self, cfg):
        return (self.panel.step_fn, cfg) if self.panel.step_fn is not None else cfg

    def _start(self, what: str, work, wait: bool):
        p = self.panel
        self.result.value = ""        # the last result is not this one's
        self.progress.value = f"<b>⏳ {what}: starting</b>"     # said at once
        self.shown = None
        self._stop.clear()
        self._set_busy(True, what)
        out: dict = {}

        def body():
            done = ""
            try:
                with captured(p.log.append_stdout), \
                        Ticker(self.progress, f"{what}: starting") as tick:
                    shows = p.lab.progress
                    p.lab.progress = tick.set_detail
                    try:
                        out["result"] = work(tick)
                    finally:
                        p.lab.progress = shows
                where = "stopped: " if self._stop.is_set() else ""
                done = f"{where}{what} done in {tick.elapsed:.1f} s"
            except BaseException as e:  # noqa: BLE001 - a thread's error has nowhere else to go
                msg = html.escape(str(e).splitlines()[0] if str(e) else "")
                self.progress.value = ""
                self.result.value = (f"<div style='{ERROR_STYLE}'>{what} failed: "
                                     f"{type(e).__name__}: {msg}</div>")
            finally:
                # the buttons come back (Stop goes) before the words say done: a page
                # never shows "done" beside a Stop that stops nothing
                self._set_busy(False)
                if done:
                    self.progress.value = done
                p._refresh_history()
                p.repicture.poke()        # the saved picture shows the result too
        self.thread = threading.Thread(target=body, name=f"nbtools-{what.lower()}", daemon=True)
        self.thread.start()
        if not wait:
            return None
        self.thread.join()
        return out.get("result")

    def sections(self) -> list:
        """What ``result`` shows, for the panel's picture: a Try's comparison or an
        exploration, as lines."""
        if isinstance(self.shown, Exploration):
            return [(exploration_lines(self.shown), None)]
        if self.shown is not None:
            return [(comparison_lines(self.shown), None)]
        return []

    def _set_busy(self, busy: bool, what: str = "") -> None:
        p = self.panel
        p.work.begin(what) if busy else p.work.end()   # every other action waits
        self.stop_button.disabled = False
        self.stop_button.description = "Stop"
        self.stop_button.layout.display = "" if busy else "none"


class _Rows:
    """The rows so far, shaped as steps_html reads an Exploration."""

    def __init__(self, rows):
        self.rows = rows
