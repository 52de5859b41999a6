"""Engine side: what else runs in the engine process while steps are timed, and the
switches that keep it off the host for the measured and profiled steps.

A lab engine is a bigger process than a plain training script: an ipyparallel kernel, the
compile recorder's hooks, a liveness watchdog, a peer-failure watcher, progress messages.
Each of these can take host time from a host-bound step (a Python thread that wakes takes
the GIL from the step's thread; a Python callback runs on every compiled-frame entry; a
collection walks every object the engine holds). benchmarks/fidelity.py measures the lab
against a plain script with each switch at its old setting (``BEFORE``) and at its default.

``SETTINGS`` (defaults: the quiet behaviour):
- ``progress_steps``: publish per-step progress in the measured and profiled phases too
  (False: one message when the phase starts; warm-up steps, where compiles happen, keep
  theirs).
- ``gc_freeze``: collect once before the timed steps and freeze what survives
  (gc.freeze), so the collections a step triggers walk only the objects made since, as in
  a small plain process; unfrozen after the steps (a frozen object is never collected).
- ``slow_watchers``: the liveness watchdog and the peer-failure watcher poll every
  ``WATCH_TIMED_S`` while steps are timed instead of every 0.25-0.5 s (each wakeup takes the
  GIL from the step). Not stopped: a peer that fails mid-step must still be noticed.
- ``frame_hook_after_warmup``: the compile recorder's count of compiled-frame entries
  (a Python call per entry) stays on only for the warm-up steps, which already tell
  whether compiled code ran; off for the timed steps. Kept on when there is no warm-up.
- ``sample_machine``: sample the machine's state over the timed steps (engine/machine.py).
  Not a cost removed but one added: on by default, off in ``BEFORE`` (the engine had no
  sampler), so the benchmark's 'after' pays for it.
"""
from __future__ import annotations

import contextlib
import gc
import threading

DEFAULTS = dict(progress_steps=False, gc_freeze=True, slow_watchers=True,
                frame_hook_after_warmup=True, sample_machine=True)
BEFORE = dict(progress_steps=True, gc_freeze=False, slow_watchers=False,
              frame_hook_after_warmup=False, sample_machine=False)
"""What the engine did before these switches (benchmarks/fidelity.py's 'before')."""
SETTINGS = dict(DEFAULTS)
WATCH_TIMED_S = 2.0

_timed = threading.Event()      # set while measured/profiled steps run


def configure(**switches) -> dict:
    """Set switches on this engine (unknown names are an error); returns the settings.
    ``configure(**BEFORE)`` restores the old behaviour, ``configure(**DEFAULTS)`` the new."""
    bad = sorted(set(switches) - set(DEFAULTS))
    if bad:
        raise ValueError(f"unknown switch(es) {bad}; known: {sorted(DEFAULTS)}")
    SETTINGS.update(switches)
    return dict(SETTINGS)


def poll_interval(normal_s: float) -> float:
    """How long a watcher sleeps between polls now."""
    return WATCH_TIMED_S if _timed.is_set() and SETTINGS["slow_watchers"] else normal_s


def publish_step(phase: str) -> bool:
    """Whether a step's progress message goes out in this phase."""
    return phase == "warmup" or SETTINGS["progress_steps"]


@contextlib.contextmanager
def timed_steps(recorder=None, warmed: bool = True, sampler=None):
    """Around the measured and profiled steps; ``sampler`` (engine/machine.py) samples the
    machine while they run, started after the collection and stopped before the unfreeze."""
    frozen = hook_off = False
    if SETTINGS["gc_freeze"]:
        gc.collect()
        gc.freeze()
        frozen = True
    if recorder is not None and warmed and SETTINGS["frame_hook_after_warmup"]:
        hook_off = recorder.pause_frame_hits()
    _timed.set()
    if sampler is not None:
        sampler.start()
    try:
        yield
    finally:
        if sampler is not None:
            sampler.stop()
        _timed.clear()
        if hook_off:
            recorder.resume_frame_hits()
        if frozen:
            gc.unfreeze()
