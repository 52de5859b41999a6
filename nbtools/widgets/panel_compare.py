"""widgets: the panel's Compare A / B. One round compares the two picked runs as they are
(quick: in the click handler); more rounds run their configs again (lab.ab, A B B A a
round) in a background thread, so the kernel still takes the page's messages: Stop ends
the rounds keeping the finished ones. Progress (round k of n, side, elapsed, the run's
phase), failed runs, the verdict and the table all land in the panel; nothing the thread
does reaches the notebook's output or JupyterLab's Log Console (thread_output)."""
from __future__ import annotations

import html
import threading
from typing import Optional

import ipywidgets as W

from nbtools.ui.bokehjs import LiveBokehModel
from nbtools.ui.html import comparison_html
from nbtools.ui.summary_view import comparison_lines
from nbtools.ui.timeline import compare_figure
from nbtools.widgets.panel_parts import button, html_widget, Ticker
from nbtools.widgets.panel_work import ERROR_STYLE, say
from nbtools.widgets.thread_output import Stoppable, captured
STOP_TIP = "end the rounds after the run in progress; the finished rounds are compared"


class Comparer(Stoppable):
    """Compare's own widgets (progress line, failed runs, Stop) and its runs."""

    def __init__(self, panel):
        self.panel = panel
        self.progress = html_widget("", "nbtools-compare-status")
        self.failures = html_widget("", "nbtools-compare-failures")
        self.stop_button = button("Stop", self.stop, "nbtools-stop", icon="stop",
                                   button_style="danger",
                                   layout=W.Layout(width="auto", display="none"))
        self.stop_button.tooltip = STOP_TIP
        self.thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self.result = None         # the last Comparison made (None after a failed one)
        self.shown = None          # (Comparison, its figure's layout) on screen, or None

    # -- the button and the Python call ------------------------------------------------
    def compare(self, wait: bool = True):
        """Compare the pair picked. ``wait``: run the rounds here and return the Comparison
        (None when it failed: the reason is in the panel); else (the button) start them in
        a thread and return None at once."""
        p = self.panel
        if p.work.busy(self.progress, "Compare"):
            return None
        a, b, rounds = p.compare_a.value, p.compare_b.value, p.compare_rounds.value
        if not a or not b:
            say(self.progress, "pick two runs (A and B) to compare", error=True)
            return None
        self.clear()             # the last verdict goes at once: it is not this one's
        if rounds == 1:          # no runs: the two runs' steps as they are
            return self._at_once(a, b)
        self._stop.clear()
        self._set_busy(True)
        # in words before the thread's first tick: the click's answer is immediate
        self.progress.value = f"<b>⏳ Compare: round 1 of {rounds}</b> starting"
        self.thread = threading.Thread(target=self._rounds, args=(a, b, rounds),
                                       name="nbtools-compare", daemon=True)
        self.thread.start()
        if not wait:
            return None
        self.thread.join()
        return self.result

    def clear(self) -> None:
        """Take the comparison on screen away (verdict, table, timelines, failed runs)."""
        p = self.panel
        self.failures.value = self.progress.value = p.compare_html.value = ""
        self.show_view(None)
        self.shown = p.comparison = p.compared = None
        p.repicture.poke()

    def _at_once(self, a, b):
        """One round: the two runs compared as they are, in the click handler; the line
        says so from the first moment (the verdict took seconds to come, with no word)."""
        p = self.panel
        p.work.begin("Compare")
        try:
            with Ticker(self.progress, f"Compare: #{a} against #{b}") as tick:
                cmp = self._finish(a, b, lambda: p.lab.compare(a, b))
        finally:
            p.work.end()
        self.progress.value = (f"compared #{a} and #{b} in {tick.elapsed:.1f} s"
                               if cmp is not None else "")
        return cmp

    # -- the rounds (in the thread) --------------------------------------------------------
    def _rounds(self, a, b, rounds) -> None:
        p, said = self.panel, None
        try:
            with captured(p.log.append_stdout):
                said = self._run_rounds(a, b, rounds)
        except BaseException as e:  # noqa: BLE001 - a thread's error has nowhere else to go
            say(self.progress, f"compare failed: {type(e).__name__}: {e}", error=True)
        finally:
            self._set_busy(False)
            # last: a person (or a page test) who reads "compared" finds the buttons back
            if said is not None:
                self.progress.value = said

    def _run_rounds(self, a, b, rounds) -> str:
        """Run the rounds and show the comparison; returns the line that says how it ended."""
        p, lab = self.panel, self.panel.lab
        failed = []
        p.log.outputs = ()          # engine output of these runs, by rank
        with Ticker(self.progress, f"Compare: round 1 of {rounds}") as tick:
            def on_run(ev):
                tick.text = (f"Compare: round {ev['round']} of {ev['rounds']} · {ev['side']} "
                             f"(run {ev['index']} of {ev['of']})")
                if ev["phase"] == "start":
                    tick.set_detail("")
                    return
                run = ev["run"]
                p.mine.append(run.run_id)
                if not run.ok:
                    first = next((m.splitlines()[0] for m in run.errors.values() if m), "")
                    failed.append(f"round {ev['round']}: {ev['side']} run #{run.run_id} "
                                  f"{run.status}: {first}")
                    self.failures.value = _failures_html(failed)

            shows = lab.progress
            lab.progress = tick.set_detail      # the run's phase into the progress line
            try:
                cmp = self._finish(a, b, lambda: p.lab.compare(
                    a, b, rounds, workload=p.step_fn, on_run=on_run, stop=self._stop))
            finally:
                lab.progress = shows
        where = "stopped: " if self._stop.is_set() else ""
        return (f"{where}{cmp.verdict.rounds} of {rounds} rounds compared "
                f"({len(cmp.runs_a) + len(cmp.runs_b)} runs) in {tick.elapsed:.1f} s"
                if cmp is not None else f"{where}no comparison after {tick.elapsed:.1f} s")

    def _finish(self, a, b, make):
        """Make the comparison; show it (verdict, table, timelines) or why it failed."""
        p = self.panel
        try:
            cmp = make()
            text = comparison_html(cmp)
            layout = compare_figure(cmp.a, cmp.b, width=p.width)
            view = LiveBokehModel(layout)
        except Exception as e:  # noqa: BLE001 - every failure is shown in the panel
            self.result = None
            msg = str(e).splitlines()[0] if str(e) else ""
            text = f"compare failed: {type(e).__name__}: {html.escape(msg)}"
            p.compare_html.value = f"<div style='{ERROR_STYLE}'>{text}</div>"
            return None
        self.result = p.comparison = cmp
        self.shown = (cmp, layout)
        # what the comparison shows is this panel's too: Export offers it by default
        shown = [cmp.a, cmp.b] + list(cmp.runs_a or []) + list(cmp.runs_b or [])
        p.mine += [r.run_id for r in shown if r.run_id not in p.mine]
        p.compared = (a, b)       # before the re-listing: the pair on screen is this one
        p._refresh_history()
        p.compare_html.value = text
        self.show_view(view)      # a new pair is a new figure: rebuilt, not patched
        p.repicture.poke()        # the saved picture shows the comparison too
        return cmp

    def sections(self) -> list:
        """The comparison on screen for the panel's picture: its lines and timelines."""
        if self.shown is None:
            return []
        cmp, layout = self.shown
        return [(comparison_lines(cmp), layout)]

    def show_view(self, view) -> None:
        """Put ``view`` (None: nothing) where the comparison's timelines go, and close the
        view it replaces (what the page still sends it lands quietly: LiveBokehModel.close;
        the page sends nothing from a view it took off: ui/labextension)."""
        p = self.panel
        old, p.compare_view = p.compare_box.children, view
        p.compare_box.children = (view,) if view is not None else ()
        for w in old:
            w.close()

    def _set_busy(self, busy: bool) -> None:
        p = self.panel
        p.work.begin("Compare") if busy else p.work.end()   # every other action waits
        self.stop_button.disabled = False
        self.stop_button.description = "Stop"
        self.stop_button.layout.display = "" if busy else "none"


def _failures_html(lines: list) -> str:
    return "".join(f"<div style='color:#a40000'>✗ {html.escape(t)}</div>" for t in lines)
