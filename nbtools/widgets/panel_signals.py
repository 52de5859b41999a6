"""widgets: the panel's live strip: while a run runs, each rank's utilisation over the last
30 s as a line (GPU busy on a GPU, the rank process's CPU on CPU ranks), its newest SM
clock, power and temperature (GPU) or memory and host load (CPU), and how long ago its
last sample arrived. Drawn from lab/live_signals.py at every poll of the run's wait (five a
second; redrawn at most four times a second), so it moves at least once a second; a rank
whose samples stop, or whose GPU or CPU sits idle while the others work, is marked at once,
before any timeout: a stalled run shows here first.

An HTML widget of inline SVG: no BokehJS needed, cheap to resend, readable in a saved
notebook as the last state. ``SignalStrip.widget`` goes into the panel; ``show`` is what
``live_signals.watch`` calls.
"""
from __future__ import annotations

import html
import math
import time

import ipywidgets as W

from nbtools.schema.signals import BY_NAME
from nbtools.lab import live_signals

WINDOW_S = 30.0        # the seconds a line covers
STALE_S = 2.5          # no message from a rank for this long: it is marked
IDLE_PCT, IDLE_S = 5.0, 3.0    # below this busy share for this long, with the run going: idle
W_PX, H_PX = 260, 30
REDRAW_S = 0.25
IDLE_TEXT = "<span style='color:#777'>machine signals: shown while a run runs</span>"


def _busy_signal(values: dict) -> str:
    return "gpu_util_pct" if "gpu_util_pct" in values else "cpu_pct"


def _fmt(name: str, v: float) -> str:
    s = BY_NAME.get(name)
    unit = s.unit if s is not None else ""
    digits = 0 if abs(v) >= 100 or name in ("gpu_util_pct", "cpu_pct") else 1
    return f"{v:,.{digits}f}{' ' + unit if unit and unit != '/core' else unit}"


def _line(ts: list, vs: list, t_end: int, top: float) -> str:
    """The polyline's points over the last WINDOW_S seconds before ``t_end`` (ns)."""
    pts = []
    for t, v in zip(ts, vs):
        age = (t_end - t) / 1e9
        if age > WINDOW_S or v != v:
            continue
        x = W_PX * (1 - age / WINDOW_S)
        y = H_PX - 2 - (H_PX - 4) * min(max(v / top, 0.0), 1.0)
        pts.append(f"{x:.1f},{y:.1f}")
    return " ".join(pts)


def _idle_for(ts: list, vs: list) -> float:
    """Seconds the busy signal has stayed under IDLE_PCT, up to the newest sample."""
    if not ts or vs[-1] != vs[-1] or vs[-1] >= IDLE_PCT:
        return 0.0
    start = ts[-1]
    for t, v in zip(reversed(ts), reversed(vs)):
        if v == v and v >= IDLE_PCT:
            break
        start = t
    return (ts[-1] - start) / 1e9


def render(live, now: float | None = None) -> str:
    """The strip's HTML for ``live`` (lab/live_signals.LiveSignals)."""
    now = time.monotonic() if now is None else now
    ends = [live.ts[r][-1] for r in live.ranks if live.ts[r]]
    t_end = max(ends) if ends else 0
    rows = []
    for r in live.ranks:
        ts = live.ts[r]
        latest = live.latest(r)
        busy = _busy_signal(latest)
        _, vs = live.series(r, busy)
        top = max([100.0] + [v for v in vs if v == v])
        age = live.age_s(r, now)
        idle = _idle_for(ts, vs) if ts else 0.0
        if age is None:
            state, colour = "waiting for its first sample", "#777"
        elif not live.finished and age > STALE_S:
            state, colour = f"no sample for {age:.0f} s: stalled?", "#c62828"
        elif not live.finished and idle >= IDLE_S:
            state, colour = f"idle for {idle:.0f} s", "#ef6c00"
        else:
            state, colour = ("run done" if live.finished else "live"), "#2e7d32"
        parts = [f"{BY_NAME[busy].label} {_fmt(busy, latest[busy])}"] if busy in latest else []
        for name in (("sm_clock_mhz", "gpu_power_w", "gpu_temp_c") if busy == "gpu_util_pct"
                     else ("rss_mb", "host_load")):
            if name in latest:
                parts.append(f"{BY_NAME[name].label} {_fmt(name, latest[name])}")
        points = _line(ts, vs, t_end, top)
        rows.append(
            f"<tr class='nbtools-signal-row' data-rank='{r}' data-samples='{len(ts)}' "
            f"data-newest='{ts[-1] if ts else 0}'>"
            f"<td style='padding:0 6px'><b>r{r}</b></td>"
            f"<td><svg width='{W_PX}' height='{H_PX}' style='background:#f6f8fa'>"
            f"<polyline fill='none' stroke='#3182bd' stroke-width='1.5' "
            f"points='{points}'/></svg></td>"
            f"<td style='padding:0 8px;font-family:monospace;font-size:12px'>"
            f"{html.escape(' · '.join(parts) or 'no signal yet')}</td>"
            f"<td class='nbtools-signal-state' style='color:{colour};font-size:12px'>"
            f"{html.escape(state)}</td></tr>")
    gpu = any(_busy_signal(live.latest(r)) == "gpu_util_pct" for r in live.ranks)
    head = (f"<div style='font-size:12px;color:#555'>machine signals, last {WINDOW_S:.0f} s "
            f"(line: {'GPU busy' if gpu else 'process CPU'}, 0-100 %)</div>")
    return head + "<table class='nbtools-signals-table'>" + "".join(rows) + "</table>"


class SignalStrip:
    """The live strip widget; ``show(live)`` redraws it (at most every REDRAW_S, and always
    when the run ends or a rank's state changes)."""

    def __init__(self):
        self.widget = W.HTML(IDLE_TEXT)
        self.widget.add_class("nbtools-signals")
        self._drawn = -math.inf
        self.draws = 0

    def watch(self, lab) -> None:
        """Show every run of ``lab`` here while it runs (the last strip set wins)."""
        live_signals.watch(lab, self.show)

    def show(self, live) -> None:
        """Redraw from ``live`` (called from the run's wait, in whatever thread runs it)."""
        now = time.monotonic()
        if not live.finished and now - self._drawn < REDRAW_S:
            return
        self.widget.value = render(live, now)
        self._drawn = now
        self.draws += 1
