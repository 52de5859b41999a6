"""Waiting for a run's ranks: their results, their output as it arrives (tagged by rank,
library warnings set aside), progress, and the ranks that died or were left waiting for a
failed peer."""
from __future__ import annotations

import sys
import time

from nbtools.lab import engine_output, live_signals, progress_view, recovery
from nbtools.schema import progress, signals

# Kineto prints a USDT line at every profiler start/stop: not the user's output.
_NOISE = ("USDT:",)


def wait(lab, ars: dict, timeout: float, run_id: str = ""):
    """Wait for every rank, up to the timeout. Once a rank has failed, the others get
    ``peer_grace`` seconds (one second when its engine died): a rank still running then
    is waiting in a collective for the failed one, and is reported as such (its engine
    is replaced before the next run). A dead engine is seen from its exit status within
    a poll, not when ipyparallel's heartbeats give up on it."""
    deadline = time.monotonic() + timeout
    shown = {r: [0, 0] for r in ars}
    warned = {r: engine_output.Splitter() for r in ars}
    failed_at, dead = None, {}
    view = _progress_view(lab, ars, run_id)
    live = _live(lab, ars, run_id)
    while True:
        dead.update(recovery.dead_ranks(lab, ars, dead))
        pending = [ar for r, ar in ars.items() if not ar.ready() and r not in dead]
        echo(lab, ars, shown, warned)
        if view is not None:
            view.update(published(ars, progress.KEY))
        _show_live(lab, live, ars)
        if not pending or time.monotonic() > deadline:
            break
        if failed_at is None and (dead or any(_failed(ar) for ar in ars.values() if ar.ready())):
            failed_at = time.monotonic()
        grace = min(lab.peer_grace, recovery.DEAD_GRACE_S) if dead else lab.peer_grace
        if failed_at is not None and time.monotonic() - failed_at > grace:
            break
        lab.client.wait(pending, timeout=0.2)
    for ar in ars.values():   # output can trail the result on the iopub channel
        if ar.ready():
            try:
                ar.wait_for_output(1.0)
            except Exception:
                pass
    echo(lab, ars, shown, warned)
    dead.update(recovery.dead_ranks(lab, ars, dead, finished_too=True))
    _show_live(lab, live, ars, finished=True)
    if view is not None:
        view.update(published(ars, progress.KEY))
        done = all(ar.ready() or r in dead for r, ar in ars.items())
        view.close("done" if done and not dead and not any(_failed(ar) for ar in ars.values())
                   else "failed" if done or failed_at is not None else "timed out")
    reports, waiting = {}, []
    for r, ar in ars.items():
        if r in dead:
            reports[r] = dict(rank=r, status="failed", error_type="EngineDied",
                              error=f"rank {r}'s engine died: {dead[r]}")
            continue
        if not ar.ready():
            waiting.append(r)
            continue
        try:
            reports[r] = ar.get()
        except Exception as e:  # the engine itself died (e.g. killed by a NCCL watchdog)
            reports[r] = dict(rank=r, status="failed", error=f"engine error: {e}")
            if "EngineError" in (getattr(e, "ename", None) or type(e).__name__):
                dead[r] = "reported by ipyparallel"
    lab._replace |= set(dead)
    if failed_at is not None:
        for r in waiting:
            reports[r] = dict(rank=r, status="failed", error=(
                "stopped because a peer failed: still waiting (in a collective) "
                f"{grace:.0f} s after it; its engine is replaced"))
        lab._replace |= set(waiting)
        waiting = []
    # every rank's log lines of this run, in full: what the folded lines stand for
    for splitter in warned.values():
        splitter.close()          # a list the run's last lines left open
    lab.engine_warnings = {r: warned[r].records + engine_output.from_report(
        reports.get(r, {}).get("warnings")) for r in ars}
    said = engine_output.to_say(lab.engine_log, lab.engine_warnings, run_id)
    if lab.echo:
        engine_output.show(said)
    return reports, waiting

def _progress_view(lab, ars, run_id):
    """A callable progress (the panel's status, explore's line) gets the text; else the
    lab's own view, unless it was told to be quiet (Lab(echo=False), lab.progress=False)."""
    if not lab.progress:
        return None
    if callable(lab.progress):
        return progress_view.View(list(ars), run_id, sink=lab.progress)
    if not getattr(lab, "echo", True):
        return None
    return progress_view.View(list(ars), run_id)

def published(ars: dict, key: str) -> dict:
    """rank -> the latest data message the rank's engine published under ``key`` (None
    before its first) from the ranks' AsyncResults: the progress and the live signals."""
    out = {}
    for r, ar in ars.items():
        try:
            out[r] = (ar.data or {}).get(key)
        except Exception:   # noqa: BLE001 - a result without data yet
            out[r] = None
    return out


def _live(lab, ars, run_id):
    """The run's live signals where something shows them (the panel's strip)."""
    return live_signals.LiveSignals(list(ars), run_id) \
        if live_signals.viewer(lab) is not None else None


def _show_live(lab, live, ars, finished: bool = False) -> None:
    if live is None:
        return
    live.update(published(ars, signals.KEY))
    live.finished = finished
    try:
        live_signals.viewer(lab)(live)
    except Exception:  # noqa: BLE001 - a broken view must not stop the run's wait
        pass


def echo(lab, ars, shown, warned=None) -> None:
    """Engine output (prints, warnings, NCCL_DEBUG lines written to the fds) reaches the
    notebook tagged by rank, as it arrives. c10's log lines on stderr are set aside in
    ``warned`` (rank -> engine_output.Splitter) and shown folded after the run."""
    if not lab.echo:
        return
    for r, ar in ars.items():
        for k, (stream, target) in enumerate(((ar.stdout, sys.stdout), (ar.stderr, sys.stderr))):
            text = stream if isinstance(stream, str) else "".join(stream or [])
            new = text[shown[r][k]:]
            if "\n" in new:
                new = new[:new.rindex("\n") + 1]
                lines = [ln for ln in new.splitlines() if not ln.startswith(_NOISE)]
                if k == 1 and warned is not None:
                    lines, _ = warned[r].feed(lines)
                if lines:
                    progress_view.clear_line()      # not after a progress line's text
                    target.write("".join(f"[rank {r}] {line}\n" for line in lines))
                shown[r][k] += len(new)


def _failed(ar) -> bool:
    try:
        return ar.get(0).get("status") != "ok"
    except Exception:
        return True
