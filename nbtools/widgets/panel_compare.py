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
from nbtools.ui.timeline import compare_figure
from nbtools.widgets.panel_parts import button, html_widget, Ticker
from nbtools.widgets.thread_output import Stoppable, captured

ERROR_STYLE = ("border:1px solid #d62728;background:#fdecea;color:#a40000;padding:4px 8px;"
               "white-space:pre-wrap;font-family:monospace;font-size:12px")
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
        self._retired: list = []   # views taken off the page, closed at the next change

    # -- the button and the Python call ------------------------------------------------
    def compare(self, wait: bool = True):
        """Compare the pair picked. ``wait``: run the rounds here and return the Comparison
        (None when it failed: the reason is in the panel); else (the button) start them in
        a thread and return None at once."""
        p = self.panel
        if p._busy:
            return None
        a, b, rounds = p.compare_a.value, p.compare_b.value, p.compare_rounds.value
        if not a or not b:
            p._set_error("pick two runs (A and B) to compare")
            return None
        p._set_error("")
        self.failures.value = ""
        if rounds == 1:          # no runs: the two runs' steps as they are
            return self._finish(a, b, lambda: p.lab.compare(a, b))
        self._stop.clear()
        self._set_busy(True)
        self.thread = threading.Thread(target=self._rounds, args=(a, b, rounds),
                                       name="nbtools-compare", daemon=True)
        self.thread.start()
        if not wait:
            return None
        self.thread.join()
        return self.result

    # -- the rounds (in the thread) --------------------------------------------------------
    def _rounds(self, a, b, rounds) -> None:
        p, said = self.panel, None
        try:
            with captured(p.log.append_stdout):
                said = self._run_rounds(a, b, rounds)
        except BaseException as e:  # noqa: BLE001 - a thread's error has nowhere else to go
            p._set_error(f"compare failed: {type(e).__name__}: {html.escape(str(e))}")
            self.progress.value = ""
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
            view = LiveBokehModel(compare_figure(cmp.a, cmp.b, width=p.width))
        except Exception as e:  # noqa: BLE001 - every failure is shown in the panel
            self.result = None
            msg = str(e).splitlines()[0] if str(e) else ""
            text = f"compare failed: {type(e).__name__}: {html.escape(msg)}"
            p._set_error(text)
            p.compare_html.value = f"<div style='{ERROR_STYLE}'>{text}</div>"
            return None
        self.result = p.comparison = cmp
        # what the comparison shows is this panel's too: Export offers it by default
        shown = [cmp.a, cmp.b] + list(cmp.runs_a or []) + list(cmp.runs_b or [])
        p.mine += [r.run_id for r in shown if r.run_id not in p.mine]
        p.compared = (a, b)       # before the re-listing: the pair on screen is this one
        p._refresh_history()
        p.compare_html.value = text
        self.show_view(view)      # a new pair is a new figure: rebuilt, not patched
        return cmp

    def show_view(self, view) -> None:
        """Put ``view`` (None: nothing) where the comparison's timelines go. The view it
        replaces is closed at the next replacement, not now: as the page takes it down,
        BokehJS sends it a burst of document changes, and a comm already closed here
        answers each with "No such comm" on the kernel's stderr (the Log Console)."""
        p = self.panel
        old, p.compare_view = p.compare_box.children, view
        p.compare_box.children = (view,) if view is not None else ()
        for w in self._retired:
            w.close()
        self._retired = list(old)

    def _set_busy(self, busy: bool) -> None:
        p = self.panel
        p._busy = busy
        # the pair and its rounds stay as they are while the rounds run
        for w in (p.compare_button, p.compare_a, p.compare_b, p.compare_rounds):
            w.disabled = busy
        p.run_button.disabled = busy or bool(p.guard.reason)
        self.stop_button.disabled = False
        self.stop_button.description = "Stop"
        self.stop_button.layout.display = "" if busy else "none"


def _failures_html(lines: list) -> str:
    return "".join(f"<div style='color:#a40000'>✗ {html.escape(t)}</div>" for t in lines)
