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
- ``gc_freeze``: before an engine's first model, collect once and freeze what survives
  (gc.freeze): torch, Dynamo, pandas, ipykernel, the process group, 460k objects that live
  as long as the engine. No later collection walks them: a full one took 0.3 s of each
  rank's CPU on 2 CPU cores, and the engine paid one or two for every model it built
  (more than a small run's whole time there). Later collections (before the timed steps,
  when a model goes, and those the steps trigger) walk only what runs made since, as in a
  plain script's process. The freeze happens only where no model is held (a model is
  never frozen, so a dropped one is freed by the next collection); after a failure
  (process_group.py) everything is unfrozen and collected once, so a process group in a
  reference cycle is freed and gloo closes its connections.
- ``slow_watchers``: the liveness watchdog and the peer-failure watcher poll every
  ``WATCH_TIMED_S`` while steps are timed instead of every 0.25-0.5 s (each wakeup takes the
  GIL from the step). Not stopped: a peer that fails mid-step must still be noticed.
- ``frame_hook_after_warmup``: the compile recorder's count of compiled-frame entries
  (a Python call per entry) stays on only for the warm-up steps, which already tell
  whether compiled code ran; off for the timed steps. Kept on when there is no warm-up.
- ``sample_machine``: sample the machine's signals through the whole run and send the
  latest to the client twice a second (engine/signals.py: 50 samples a second on a GPU,
  20 on CPU). Not a cost removed but one added: on by default, off in ``BEFORE`` (the
  engine had no sampler), so the benchmark's 'after' pays for it; off, a run has no
  ``samples``, no machine columns and no live strip (benchmarks/signals_cost.py measures
  the lab with it against the lab without it).
- ``cupti_teardown``: let Kineto detach CUPTI (``cuptiFinalize``) when a profiler session
  ends, by setting ``TEARDOWN_CUPTI=1`` in the engine process (Kineto reads it with getenv
  at every teardown). Without it CUPTI stays subscribed for the process's life and every
  later kernel launch pays its callback: on 1 x H200 a host-bound step ran 1.08-1.36x
  slower after one profiled session, 1.20-1.28x after torch's empty ``_init_for_cuda_graphs``
  session, and 0.80-0.97x with the teardown (docs/findings.md §8, three runs of
  benchmarks/gpu/cupti_after_profile.py). Only where torch allows it (CUDA 12.6 or newer:
  older CUPTI crashed re-attaching after a teardown with CUDA graphs, which is why torch
  sets ``TEARDOWN_CUPTI=0`` itself there), only while this engine has run no config that
  captures CUDA graphs (whether kernels of a graph captured while CUPTI was detached show
  in later profiles is not checked yet), and never over the person's own setting.
"""
from __future__ import annotations

import contextlib
import gc
import os
import threading

DEFAULTS = dict(progress_steps=False, gc_freeze=True, slow_watchers=True,
                frame_hook_after_warmup=True, sample_machine=True, cupti_teardown=True)
BEFORE = dict(progress_steps=True, gc_freeze=False, slow_watchers=False,
              frame_hook_after_warmup=False, sample_machine=False, cupti_teardown=False)
"""What the engine did before these switches (benchmarks/fidelity.py's 'before')."""
SETTINGS = dict(DEFAULTS)
WATCH_TIMED_S = 2.0

_timed = threading.Event()      # set while measured/profiled steps run
_TEARDOWN = "TEARDOWN_CUPTI"
_teardown_ours = False          # TEARDOWN_CUPTI=1 was set by us (not by the person or torch)
_graphs_seen = False            # a config that captures CUDA graphs has run in this engine
_frozen = False                 # the start-up heap is frozen (collect()), not undone
_holds_state = False            # and so is a run's state (timed_steps after a thaw)
_walk_all = True                # the next timed steps collect every generation (new state)


def configure(**switches) -> dict:
    """Set switches on this engine (unknown names are an error); returns the settings.
    ``configure(**BEFORE)`` restores the old behaviour, ``configure(**DEFAULTS)`` the new."""
    bad = sorted(set(switches) - set(DEFAULTS))
    if bad:
        raise ValueError(f"unknown switch(es) {bad}; known: {sorted(DEFAULTS)}")
    SETTINGS.update(switches)
    return dict(SETTINGS)


def cupti_teardown(cuda_version, captures_graphs: bool) -> bool:
    """Before a run's first profiler session: set or clear our ``TEARDOWN_CUPTI=1`` (see
    ``cupti_teardown`` above). ``cuda_version``: torch.version.cuda (None on a CPU build,
    where Kineto has no CUPTI and the variable is harmless). Returns whether teardown is on
    for this run."""
    global _teardown_ours, _graphs_seen
    _graphs_seen = _graphs_seen or captures_graphs
    theirs = _TEARDOWN in os.environ and not _teardown_ours
    if theirs:
        return os.environ[_TEARDOWN] == "1"
    want = SETTINGS["cupti_teardown"] and not _graphs_seen and _new_enough(cuda_version)
    if want:
        os.environ[_TEARDOWN] = "1"
    elif _teardown_ours:
        os.environ.pop(_TEARDOWN, None)
    _teardown_ours = want
    return want


def _new_enough(cuda_version) -> bool:
    if not cuda_version:
        return True
    try:
        major, minor = (int(x) for x in str(cuda_version).split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (12, 6)


def poll_interval(normal_s: float) -> float:
    """How long a watcher sleeps between polls now."""
    return WATCH_TIMED_S if _timed.is_set() and SETTINGS["slow_watchers"] else normal_s


def publish_step(phase: str) -> bool:
    """Whether a step's progress message goes out in this phase."""
    return phase == "warmup" or SETTINGS["progress_steps"]


@contextlib.contextmanager
def timed_steps(recorder=None, warmed: bool = True, sampler=None):
    """Around the measured and profiled steps; ``sampler`` (engine/signals.py, sampling
    since the run began) lists the processes on the GPU after the collection and again
    after the steps."""
    global _frozen, _holds_state, _walk_all
    hook_off = False
    if SETTINGS["gc_freeze"]:
        # what runs made (the frozen start-up heap is not walked): all of it when the run
        # built new state; on a reused state only the young generations, as the last full
        # walk of this state left the old one clean (a full walk is ~0.04 s on 2 CPU cores)
        gc.collect(2 if _walk_all or not _frozen else 1)
        _walk_all = False
        if not _frozen:         # thawed (a switch turned off and on): freeze all, the run's
            gc.freeze()         # state too; the next collect() walks everything once
            _frozen = _holds_state = True
    else:
        thaw()
    if recorder is not None and warmed and SETTINGS["frame_hook_after_warmup"]:
        hook_off = recorder.pause_frame_hits()
    _timed.set()
    if sampler is not None:
        sampler.timed_start()
    try:
        yield
    finally:
        if sampler is not None:
            sampler.timed_stop()
        _timed.clear()
        if hook_off:
            recorder.resume_frame_hits()


def thaw() -> None:
    """Unfreeze the start-up heap: every object can be collected again (the next
    collection walks them all, and freezes again where ``gc_freeze`` is on)."""
    global _frozen, _holds_state
    if _frozen:
        gc.unfreeze()
        _frozen = _holds_state = False


def collect(everything: bool = False) -> None:
    """Where the engine holds no model (engine/state.py's release_model): collect what runs
    left behind (a dropped model in its reference cycles), walking only what is not frozen;
    the first call, or one with ``everything``, walks all and then freezes what survived
    (``gc_freeze`` above). Called with no model held, so no model is frozen here; one the
    timed steps froze after a thaw() is freed by a walk of everything."""
    global _frozen, _walk_all
    _walk_all = True
    if everything or _holds_state:
        thaw()
    gc.collect()
    if SETTINGS["gc_freeze"] and not _frozen:
        gc.freeze()
        _frozen = True


def new_state() -> None:
    """A run built new state without dropping the model (only its inputs changed): the
    timed steps' collection walks every generation."""
    global _walk_all
    _walk_all = True
