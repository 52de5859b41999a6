"""An engine started by a Lab: dies with its client, and is warm before it is asked.

``start()`` runs first thing in a local engine's process (engine/boot.py), or as the
engine's startup command (ipyparallel's IPEngine.startup_command, engines on other hosts),
before the engine has any work; a second call does nothing:

- a watchdog thread polls the client's pid (passed as NBTOOLS_CLIENT_PID: ipyparallel may
  launch engines through another process, so the parent is not necessarily the client)
  and takes the engine and its children down when the client is gone. The client's guard
  process (reaper.py) does the same from outside; this covers a guard that was killed too.
- ``import torch`` (then torch._dynamo and the engine side of a run, which the first run
  needs) starts in the background, so it overlaps the engine's interpreter start and
  registration and the lab's other start-up steps instead of following them (8 s on an
  H200 host), and a spare is warm when swapped in.

Nothing here imports torch at module level, bokeh or ipywidgets.
"""
from __future__ import annotations

import os
import signal
import threading
import time

POLL_S = 0.5


def start() -> None:
    """Once per engine: watch the client's pid (exit when it is gone) and warm torch's import
    in the background, so the first run does not pay for it."""
    global _STARTED, _STARTED_AT
    if _STARTED:
        return
    _STARTED, _STARTED_AT = True, time.time()
    client = int(os.environ.get("NBTOOLS_CLIENT_PID", "0") or 0)
    if client > 0:
        threading.Thread(target=_watch, args=(client,), name="nbtools-client-watch",
                         daemon=True).start()
    if os.environ.get("NBTOOLS_WARM", "1") == "1":
        from nbtools.engine.state import S
        S.warm_thread = threading.Thread(target=_warm, name="nbtools-warm", daemon=True)
        S.warm_thread.start()


_STARTED = False
_JOINABLE = threading.Event()       # torch and torch.distributed imported (or failed)


# Lab()'s calls on an engine (info, setup) need only torch and torch.distributed. The rest
# of the warm import (torch._dynamo, the run's modules: seconds of CPU) waits until the
# lab's setup is done (process_group.setup sets state.S.import_rest), so it does not take the CPU
# and the interpreter lock from those calls; on a spare no lab has set up, at most REST_WAIT_S.
REST_WAIT_S = 5.0


def wait_joinable(timeout: float = 300.0) -> bool:
    """On the engine: block until what joining a lab needs (torch, torch.distributed) is
    imported, and let the rest of the warm import begin now instead of after a setup. A
    spare is of use from here: Lab() returns when its spares are this far, and the rest
    (seconds of torch._dynamo on a GPU host) goes on beside the person's first run, which
    waits for it before its first step (state.S.finish_warm_import)."""
    from nbtools.engine.state import S
    S.import_rest.set()
    return S.warm_thread is None or _JOINABLE.wait(timeout)


def wait_warm(timeout: float = 300.0) -> bool:
    """On the engine: block until the background imports are done (all of them now)."""
    from nbtools.engine.state import S
    return S.finish_warm_import(timeout)


# when each part of the background import finished (time.time()): benchmarks/startup.py
# reads them to say what an engine's start is spent on
WARM_AT: dict = {}


def warm_times() -> dict:
    """On the engine: when liveness.start() ran and each part of the warm import finished,
    as wall-clock times (comparable with the client's on one host)."""
    return dict(started=_STARTED_AT, **WARM_AT)


_STARTED_AT = None


def _warm() -> None:
    try:
        import torch  # noqa: F401
        WARM_AT["torch"] = time.time()
        import torch.distributed  # noqa: F401
        WARM_AT["torch.distributed"] = time.time()
        _JOINABLE.set()
        from nbtools.engine.state import S
        S.import_rest.wait(REST_WAIT_S)
        # what a run needs, after what Lab()'s setup needs (the two above): the compile
        # recorder's torch._dynamo (seconds) and the engine side of a run, so a first run
        # (a spare's too) pays only for its model
        import torch._dynamo  # noqa: F401
        import torch.profiler  # noqa: F401
        from nbtools.engine import apply, capture, compile_recorder, custom_step, runner, scenarios  # noqa: F401
        from nbtools.trace import load  # noqa: F401
        WARM_AT["the rest (dynamo, run modules)"] = time.time()
    except Exception:
        pass    # the lab's own calls import it again and report the error there
    finally:
        _JOINABLE.set()


def client_alive(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie (a killed client not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:    # a killed client whose parent has not reaped it yet is a zombie: gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _watch(pid: int) -> None:
    from nbtools.engine.quiet import poll_interval
    while client_alive(pid):
        time.sleep(poll_interval(POLL_S))
    die_with_children()


def die_with_children() -> None:
    """Kill this engine's child processes, then the engine itself (SIGKILL): the end for
    an engine whose client is gone."""
    try:
        import psutil
        for child in psutil.Process().children(recursive=True):
            try:
                child.kill()
            except psutil.Error:
                pass
    except Exception:
        pass
    os.kill(os.getpid(), signal.SIGKILL)


def describe_exit(returncode) -> str:
    """Popen's return code as a person reads it: 'killed by SIGKILL', 'exit code 3'."""
    if returncode is None:
        return "exited (status unknown)"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exit code {returncode}"


def controller_main() -> None:
    """``python -m nbtools.engine.liveness ARGS``: ipyparallel's controller with the same watchdog
    (it has no startup hook), killing its schedulers with it when the client is gone."""
    import sys
    start()
    from ipyparallel.controller.app import main
    sys.argv[0] = "ipcontroller"
    main()


if __name__ == "__main__":
    controller_main()
