"""Client side: show where a run is while Lab.run waits — a progress widget in a live
kernel, a text line in a notebook export, one line rewritten in place on a terminal (nothing
when stderr is a file or a pipe), or a callback (the panel's status). ``Lab(echo=False)``
shows none of it; a callback still gets the text.

The state per rank comes from progress.publish on the engines (``ar.data``). Elapsed times
are measured here, when a rank is first seen in a phase, so engine clocks do not matter.
"""
from __future__ import annotations

import importlib.util
import shutil
import sys
import time
from typing import Callable, Optional

from nbtools.common.display_mode import static_mode
from nbtools.common.text import terminal_text
from nbtools.results.views import view
from nbtools.schema.progress import PHASES


class Tracker:
    """Phases seen per rank, with when each began here; text for a person. Pure: no I/O."""

    def __init__(self, ranks, now: Optional[float] = None):
        self.t0 = time.monotonic() if now is None else now
        self.ranks = sorted(ranks)
        self.state = {r: None for r in self.ranks}
        self.since = {r: self.t0 for r in self.ranks}
        self.phase_s: dict = {}      # phase -> seconds the slowest rank spent in it
        self.engine_phase_s: dict = {}

    def update(self, states: dict, now: Optional[float] = None) -> bool:
        """Take the newest states; True when a phase or step changed."""
        now = time.monotonic() if now is None else now
        changed = False
        for r, st in states.items():
            old = self.state.get(r)
            if not st or st == old:
                continue
            if old is None or old.get("phase") != st.get("phase"):
                self._close_phase(r, now)
                self.since[r] = now
            self.state[r], changed = st, True
        return changed

    def _close_phase(self, r, now) -> None:
        old = self.state.get(r)
        if old is not None and old.get("phase") != "done":
            p = old["phase"]
            self.phase_s[p] = max(self.phase_s.get(p, 0.0), now - self.since[r])

    def finish(self, now: Optional[float] = None) -> None:
        """Close every rank's current phase at ``now`` (the run's end)."""
        now = time.monotonic() if now is None else now
        for r in self.ranks:
            self._close_phase(r, now)
            self.since[r] = now

    def phase(self) -> str:
        """The phase of the rank furthest behind: what the run as a whole is waiting on."""
        seen = [st["phase"] for st in self.state.values() if st and st.get("phase") in PHASES]
        if len(seen) < len(self.ranks):
            return "start"
        return min(seen, key=PHASES.index)

    def rank_text(self, r, now: Optional[float] = None) -> str:
        """One rank's progress in words: phase, step of steps, seconds in it."""
        now = time.monotonic() if now is None else now
        st = self.state.get(r)
        if st is None:
            return f"rank {r}: waiting for the engine"
        step = f" step {st['step']}/{st['of']}" if st.get("step") else ""
        return f"rank {r}: {st['phase']}{step} ({now - self.since[r]:.0f} s)"

    def text(self, now: Optional[float] = None) -> str:
        """The run's phase and time, then every rank's progress, on one line."""
        now = time.monotonic() if now is None else now
        return (f"{self.phase()} · {now - self.t0:.0f} s · "
                + " · ".join(self.rank_text(r, now) for r in self.ranks))

    def line(self, outcome: str, now: Optional[float] = None) -> str:
        """One line that stays: how long the run took and where the time went (the
        engines' own phase times, slowest rank; else what was seen here)."""
        now = time.monotonic() if now is None else now
        for st in self.state.values():
            for p, sec in ((st or {}).get("phases") or {}).items():
                if p != "done":
                    self.engine_phase_s[p] = max(self.engine_phase_s.get(p, 0.0), sec)
        if self.engine_phase_s:
            self.phase_s = dict(self.engine_phase_s)
        parts = ", ".join(f"{p} {_secs(self.phase_s[p])}" for p in PHASES if p in self.phase_s)
        return f"{outcome} in {now - self.t0:.1f} s" + (f" ({parts})" if parts else "")


class View:
    """Where the progress goes. ``sink``: a callable taking text (the panel's status).
    Else, in a kernel, one output updated in place: a bar per rank in a live front end,
    a text line in an export (NBTOOLS_STATIC); either way it ends as the one summary
    line, so a saved notebook keeps no stale bar. On a terminal: one line on stderr
    rewritten in place and wiped when the run ends (the script's own output then starts
    on a clean line); stderr redirected to a file or a pipe: nothing."""

    def __init__(self, ranks, run_id: str = "", sink: Optional[Callable[[str], None]] = None):
        self.tracker, self.run_id, self.sink = Tracker(ranks), run_id, sink
        self.bars = self.handle = self.line = None
        self._last_line = 0.0
        if sink is None and in_kernel():
            if _widgets():
                # a bar per rank: the widgets room draws it (nbtools/widgets/progress.py)
                self.bars = view("lab.progress")(self.tracker, run_id)
            else:
                from IPython.display import display
                self.handle = display(TextLine(f"run {run_id}: start"), display_id=True)
        elif sink is None:
            self.line = TerminalLine()

    def update(self, states: dict) -> None:
        """Show the ranks' new states: to the sink, the progress bars, a line updated in place
        in a kernel or on a terminal."""
        now = time.monotonic()
        changed = self.tracker.update(states, now)
        text = f"run {self.run_id}: {self.tracker.text(now)}"
        if self.sink is not None:
            self.sink(text)
        elif self.bars is not None:
            self.bars.update(now)
        elif self.handle is not None:
            if changed or now - self._last_line >= 1.0:      # in place: every change
                self.handle.update(TextLine(text))
                self._last_line = now
        elif self.line is not None:
            self.line.show(text)

    def close(self, outcome: str) -> str:
        """Leave one line saying how the run went (in place of the bars; a terminal's line
        is wiped: the run's outcome is the caller's to say). Returns it."""
        self.tracker.finish()
        line = f"run {self.run_id}: {self.tracker.line(outcome)}"
        if self.sink is not None:
            self.sink(line)
        elif self.bars is not None:
            self.bars.close(line)
            self.bars = None
        elif self.handle is not None:
            self.handle.update(TextLine(line))
        elif self.line is not None:
            self.line.clear()
        return line


class TerminalLine:
    """One line of progress on a terminal's stderr, rewritten in place ("\\r", erase line),
    cut to the terminal's width (a wrapped line cannot be rewritten). Where stderr is not a
    terminal (a file, a pipe, a CI log) it writes nothing: a log keeps no progress.

    One line per process: every TerminalLine draws the same line, and ``clear_line()``
    wipes it before other output (an engine's line, a result) is written to the terminal;
    the next ``show`` draws it again below that output."""

    _shown: Optional[str] = None      # what is on the terminal's line now (None: nothing)

    def __init__(self, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.live = _is_terminal(self.stream)

    def show(self, text: str) -> None:
        """Put ``text`` on the line, in place of what was there (one line: cut to fit)."""
        if not self.live:
            return
        width = max(20, shutil.get_terminal_size((80, 24)).columns - 1)
        text = " ".join(terminal_text(text).split())
        if len(text) > width:
            text = text[:width - 1] + "…"
        if text != TerminalLine._shown:
            self.stream.write("\r\x1b[2K" + text)
            self.stream.flush()
            TerminalLine._shown = text

    def clear(self) -> None:
        """Wipe the line (the run ended)."""
        if self.live:
            clear_line(self.stream)


def say(lab, text: str) -> None:
    """What the lab does, on stderr (a restart, where the ranks landed, a busy host), on a
    line of its own; nothing from a quiet lab (``Lab(echo=False)``)."""
    if getattr(lab, "echo", True):
        clear_line()
        print(text, file=sys.stderr, flush=True)


def clear_line(stream=None) -> None:
    """Wipe the progress line, if one is on the terminal, so what is written next starts
    on a clean line."""
    if TerminalLine._shown is None:
        return
    stream = stream if stream is not None else sys.stderr
    try:
        stream.write("\r\x1b[2K")
        stream.flush()
    except (OSError, ValueError):     # a closed stream: nothing left to wipe
        pass
    TerminalLine._shown = None


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, OSError, ValueError):
        return False


class TextLine:
    """Plain text as a display object (print() cannot be updated in place)."""

    def __init__(self, text: str):
        self.text = text

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.text}


def _secs(s: float) -> str:
    return f"{s:.1f} s" if s >= 1 else f"{s * 1e3:.0f} ms"


def position(st) -> float:
    """How far a rank is, in phases (a step counts as a fraction of its phase): the progress
    bar's value."""
    if not st or st.get("phase") not in PHASES:
        return 0.0
    i = PHASES.index(st["phase"])
    if st.get("step") and st.get("of"):
        return i + (st["step"] - 1) / st["of"]
    return float(i)


def in_kernel() -> bool:
    """True inside a Jupyter kernel (progress then goes to a display, not to stderr)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return getattr(get_ipython(), "kernel", None) is not None


def _widgets() -> bool:
    """A live front end draws widgets; an export (NBTOOLS_STATIC) keeps text only."""
    return not static_mode() and importlib.util.find_spec("ipywidgets") is not None
