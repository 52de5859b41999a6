"""Client side: the machine's signals while a run runs, as the engines send them (their
sampler's data messages, engine/signals.py, read from each rank's AsyncResult like the
progress), merged per rank: each message repeats the last seconds, so only points newer
than those already held are added, and a message lost on the way loses nothing.

What ``watch(lab, view)`` registered (the panel's live strip, widgets/panel_signals.py) is
called with the merged state at every poll of ``gather.wait``; ``age_s`` says how long ago a rank's last
message arrived here, which is what shows a stalled rank first: its engine stops sending
(or sends a GPU at 0 %) while the others go on. Pure bookkeeping, no widgets.
"""
from __future__ import annotations

import time
import weakref
from typing import Callable, Optional

KEEP_S = 60.0          # the seconds of samples held per rank
_VIEWS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # lab -> its view


def watch(lab, view: Optional[Callable]) -> None:
    """Call ``view(LiveSignals)`` at every poll of each run of ``lab`` while it runs (and once
    when it ends, ``finished`` set); None stops it. One view per lab: the last one set."""
    if view is None:
        _VIEWS.pop(lab, None)
    else:
        _VIEWS[lab] = view


def viewer(lab) -> Optional[Callable]:
    """The view ``watch`` registered for ``lab``, or None."""
    try:
        return _VIEWS.get(lab)
    except TypeError:     # an object that cannot be weakly referenced: nobody watches it
        return None


class LiveSignals:
    """Per rank: the times (epoch ns) and values of each signal received so far this run
    (the last ``KEEP_S`` seconds), when its last message arrived, and whether the run is
    over."""

    def __init__(self, ranks, run_id: str = "", keep_s: float = KEEP_S):
        self.ranks, self.run_id, self.keep_ns = sorted(ranks), run_id, int(keep_s * 1e9)
        self.ts: dict = {r: [] for r in self.ranks}
        self.values: dict = {r: {} for r in self.ranks}
        self.arrived: dict = {r: None for r in self.ranks}      # time.monotonic() here
        self.sent: dict = {r: 0 for r in self.ranks}
        self.finished = False

    def update(self, messages: dict, now: Optional[float] = None) -> bool:
        """Take the ranks' newest messages (``gather.published``); True when any point was added."""
        now = time.monotonic() if now is None else now
        changed = False
        for r, msg in messages.items():
            if not isinstance(msg, dict) or r not in self.ts:
                continue
            if self.run_id and msg.get("run_id") not in (None, "", self.run_id):
                continue                      # a message of the rank's previous run
            sent = int(msg.get("sent_ns") or 0)
            if sent <= self.sent[r]:
                continue
            self.sent[r], self.arrived[r] = sent, now
            ts = self.ts[r]
            last = ts[-1] if ts else -1
            new = [i for i, t in enumerate(msg.get("ts_ns") or ()) if t > last]
            if not new:
                continue
            for name, vals in (msg.get("values") or {}).items():
                col = self.values[r].setdefault(name, [float("nan")] * len(ts))
                col += [float(vals[i]) for i in new]
            ts += [int(msg["ts_ns"][i]) for i in new]
            for col in self.values[r].values():     # a signal missing from this message
                col += [float("nan")] * (len(ts) - len(col))
            self._trim(r)
            changed = True
        return changed

    def _trim(self, r) -> None:
        ts = self.ts[r]
        cut = next((i for i, t in enumerate(ts) if t >= ts[-1] - self.keep_ns), 0)
        if cut:
            del ts[:cut]
            for col in self.values[r].values():
                del col[:cut]

    def age_s(self, r, now: Optional[float] = None) -> Optional[float]:
        """Seconds since rank ``r``'s last message arrived (None: none yet)."""
        now = time.monotonic() if now is None else now
        return None if self.arrived[r] is None else now - self.arrived[r]

    def series(self, r, name: str) -> tuple[list, list]:
        """(times in epoch ns, values) of one rank's signal."""
        return list(self.ts[r]), list(self.values[r].get(name, []))

    def latest(self, r) -> dict:
        """signal -> the rank's newest value of it (NaN values skipped)."""
        out = {}
        for name, col in self.values[r].items():
            v = next((x for x in reversed(col) if x == x), None)
            if v is not None:
                out[name] = v
        return out
