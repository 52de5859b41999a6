"""Engine side: tell the client where a run is (phase, step) while it runs.

A long compile otherwise looks like silence. The state travels as an ipyparallel data
message (the engine's ``data_pub``): it reaches the client's AsyncResult as ``ar.data``
without mixing into the rank's printed output. Outside an ipyparallel engine (a plain
script, a test calling the runner directly) publishing does nothing. No UI here: the
client draws it (progress_view.py).
"""
from __future__ import annotations

import time

from nbtools.schema.progress import KEY
_MIN_INTERVAL_S = 0.2      # a fast step loop must not flood iopub: one message per interval

_now = {"run_id": None, "phase": None, "t_phase": 0.0, "t_sent": 0.0, "phases": {}}


def publish(phase: str, step: int | None = None, of: int | None = None,
            run_id: str | None = None) -> bool:
    """Publish (phase, step of n, seconds spent in each finished phase) for the running
    request. A new phase always goes out; steps inside a phase at most every 0.2 s, so a
    client polling now and then still learns every phase's duration. ``run_id`` starts a
    new run. Returns whether a message was sent."""
    now = time.monotonic()
    if run_id is not None and run_id != _now["run_id"]:
        _now.update(run_id=run_id, phase=None, phases={})
    if phase != _now["phase"]:
        if _now["phase"] is not None:
            _now["phases"][_now["phase"]] = now - _now["t_phase"]
        _now.update(phase=phase, t_phase=now)
    elif now - _now["t_sent"] < _MIN_INTERVAL_S:
        return False
    pub = _publisher()
    if pub is None:
        return False
    try:
        pub.publish_data({KEY: dict(phase=phase, step=step, of=of, run_id=_now["run_id"],
                                    phases=dict(_now["phases"]))})
    except Exception:   # progress is a courtesy: never fail a run over it
        return False
    _now["t_sent"] = now
    return True


def send(key: str, payload: dict) -> bool:
    """Publish ``payload`` under ``key`` on the same channel, from any thread (ipykernel's
    iopub sends through its own I/O thread): the live signals (engine/signals.py). Returns
    whether it went out; outside an ipyparallel engine nothing does."""
    pub = _publisher()
    if pub is None:
        return False
    pub.publish_data({key: payload})
    return True


def _publisher():
    try:
        from ipykernel.zmqshell import ZMQInteractiveShell
    except ImportError:
        return None
    if not ZMQInteractiveShell.initialized():
        return None
    # set by ipyparallel's engine kernel only (a plain ipykernel warns and has no client
    # that reads it)
    return getattr(ZMQInteractiveShell.instance(), "_data_pub", None)
