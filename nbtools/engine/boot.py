"""engine: a local engine process's entry point: the lab's watchdog and the background torch import start with the interpreter, then ipyparallel's engine.

``python -m nbtools.engine.boot ARGS`` is ``python -m ipyparallel.engine ARGS`` with two
things first (issue 26: what an engine did between its process start and registering):

- ``liveness.start()``. As IPEngine's startup command (the way before) it ran only after
  the engine had imported ipykernel and IPython's shell, registered with the controller
  and built its kernel, so torch's import (the longest part of an engine's start: seconds)
  began late and the lab's first call on the engine waited for it. Started here it
  overlaps all of that: the main thread spends most of its start waiting on zmq (the
  controller's reply, its first heartbeat), with the interpreter lock free.
- The controller's connection file (``NBTOOLS_CONNECTION_FILE``), waited for here and
  handed on as ``$IPP_CONNECTION_INFO``. ipyparallel's client would otherwise wait for the
  controller to write it before spawning any engine (about a second: the controller's own
  Python start), and an engine reading the file itself can read it half-written; here
  the engine's imports overlap the controller's start and only a whole file is used.
"""
from __future__ import annotations

import json
import os
import sys
import time

CONNECTION_WAIT_S = 60.0


def connection_info(path: str, wait_s: float = CONNECTION_WAIT_S):
    """The connection file's text once it is whole JSON; None when it did not come in time
    (ipyparallel then looks for it itself and says what is missing)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(path) as f:
                text = f.read()
            json.loads(text)
            return text
        except (OSError, ValueError):
            if time.monotonic() > deadline:
                return None
            time.sleep(0.02)


def main() -> None:
    """An engine process's entry point: start the liveness watch first, read the connection
    file the lab wrote, then hand over to ipyparallel's engine."""
    from nbtools.engine import liveness
    liveness.start()
    from ipyparallel.engine.app import main as engine_main     # ~1 s: overlaps the controller's start
    path = os.environ.pop("NBTOOLS_CONNECTION_FILE", "")
    if path and not os.environ.get("IPP_CONNECTION_INFO"):
        text = connection_info(path)
        if text is not None:
            os.environ["IPP_CONNECTION_INFO"] = text
    sys.argv[0] = "ipengine"
    engine_main()


if __name__ == "__main__":
    main()
