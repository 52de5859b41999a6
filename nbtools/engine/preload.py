"""Engine side: import a Workload's modules in the background before its first run.

The lab sends the names as soon as it sees the Workload (config/imports.py finds them,
lab/preload.py sends them), typically while the person is still typing the next cell.
``start(names)`` returns at once: the imports run in one daemon thread, so the engine's
main thread keeps answering the lab (its runs, its health checks) meanwhile.

A run waits for that thread (``wait``) before it unpickles its Workload, so the run never
imports beside it: two threads importing at once can meet on Python's per-module import
locks in opposite orders, and CPython then raises a deadlock ImportError in one of them.
What the run still needs then is imported, and the run's own import finds it in
sys.modules. The thread first waits for the engine's own warm import (torch,
torch._dynamo: engine/liveness.py), for the same reason.

A name that fails is recorded here (``records``), never raised: the run that really needs
it raises the same error itself, as it did without the preload.
"""
from __future__ import annotations

import importlib
import sys
import threading
import time

WAIT_S = 300.0    # a run waits this long for the background import, then imports itself

_lock = threading.Lock()
_queue: list = []
_thread = None
RECORDS: list = []          # one dict per name: name, ok, seconds, error, started, done
_taken = 0                  # RECORDS[:_taken] were reported with a run already


def start(names) -> int:
    """Queue names for the background import (ones already queued or imported are left
    out); returns how many were queued. Called by the lab through ipyparallel."""
    global _thread
    with _lock:
        known = {r["name"] for r in RECORDS} | set(_queue)
        new = [n for n in names if isinstance(n, str) and n not in known]
        _queue.extend(new)
        if new and (_thread is None or not _thread.is_alive()):
            _thread = threading.Thread(target=_work, name="nbtools-preload", daemon=True)
            _thread.start()
    return len(new)


def wait(timeout: float = WAIT_S) -> float:
    """Block until the background import is done (or timeout); the seconds waited."""
    t0 = time.perf_counter()
    t = _thread
    if t is not None and t.is_alive():
        t.join(timeout)
    return time.perf_counter() - t0


def records() -> list:
    """This engine's early imports so far: name, ok (None: still importing), seconds, error."""
    with _lock:
        return [dict(r) for r in RECORDS]


def take_new() -> list:
    """The records not yet reported with a run (a run carries them back once)."""
    global _taken
    with _lock:
        new = [dict(r) for r in RECORDS[_taken:] if r.get("done") is not None]
        _taken += len(new)
        return new


def _work() -> None:
    from nbtools.engine.state import S
    S.finish_warm_import()      # torch, torch._dynamo first (see the module's docstring)
    while True:
        with _lock:
            if not _queue:
                return
            name = _queue.pop(0)
            rec = dict(name=name, ok=None, seconds=None, error="", started=time.time(),
                       done=None)
            RECORDS.append(rec)
        t0 = time.perf_counter()
        try:
            import_name(name)
            ok, err = True, ""
        except BaseException as e:   # noqa: BLE001 - recorded; the run raises its own
            ok, err = False, f"{type(e).__name__}: {e}"[:300]
        with _lock:
            rec.update(ok=ok, error=err, seconds=time.perf_counter() - t0, done=time.time())


def import_name(name: str):
    """``a.b.c`` as a module, or else as ``from a.b import c`` does: the name ``c`` of module
    ``a.b`` (transformers' lazy top module imports its model's module on that access)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        parent, _, attr = name.rpartition(".")
        if not parent or e.name != name:
            raise
    mod = importlib.import_module(parent)
    try:
        return getattr(mod, attr)
    except AttributeError:
        raise ImportError(f"cannot import name {attr!r} from {parent!r}") from None


def loaded(names) -> dict:
    """name -> whether it is imported in this process (tests look at the engines this way)."""
    return {n: n in sys.modules for n in names}
