"""engine: a warm template that local engines are forked from, so each one skips the imports.

A local engine used to be a new interpreter (``python -m nbtools.engine.boot``) importing
ipyparallel's engine, torch, torch.distributed, torch._dynamo and the engine side of a run:
about 4.6 s of CPU each on a 2-core box, paid by every rank of every Lab(), every spare and
every engine a heal starts. A template imports them once per client process and forks an
engine per request; a forked engine costs about 0.03 s of CPU (benchmarks/engine_fork.py,
docs/benchmarks.md "Session 17"). Engines that start on CPU ranks only: forking after
anything has touched CUDA breaks CUDA in the child, and GPU engines keep the new
interpreter (lab/engine_template.py decides).

The protocol, one JSON object per line: we say ``{"ready": true}`` once imported; the
client writes
``{"id": k, "args": [...], "env": {...}, "cwd": ..., "out": path}`` to our stdin; we fork,
answer ``{"id": k, "pid": pid}`` (or ``{"id": k, "error": ...}``), and, when a child ends,
``{"exit": pid, "code": c}`` (c < 0: killed by signal -c), since only we can reap it. The
child becomes the engine: its own session, stdin from /dev/null, stdout and stderr into
``out``, the request's environment, then engine/boot.py's main() as if started by
``python -m nbtools.engine.boot args``. Our stdin closing (the client is gone) ends us;
the engines watch the client's pid themselves (engine/liveness.py).

The template imports all of an engine's imports before it says it is ready (the client
waits for that before its first fork), so a forked engine imports nothing: forks from a
half-imported template left each engine importing the rest itself beside it (session 17).
Then ``gc.freeze()``: the children's collections skip what the imports made, which would
otherwise copy those pages into every engine. Nothing here may start a thread or touch
CUDA before a fork.
"""
from __future__ import annotations

import json
import os
import signal
import sys

# What a forked engine finds imported: what joining a lab needs, then the rest of
# liveness._warm's list (engine/liveness.py).
JOIN = ["ipyparallel.engine.app", "torch", "torch.distributed"]
REST = ["torch._dynamo", "torch.profiler", "nbtools.engine.apply", "nbtools.engine.capture",
        "nbtools.engine.compile_recorder", "nbtools.engine.custom_step",
        "nbtools.engine.runner", "nbtools.engine.scenarios", "nbtools.trace.load"]
BOOT = ["-m", "nbtools.engine.boot"]


def _say(obj: dict) -> None:
    os.write(1, (json.dumps(obj) + "\n").encode())


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _say({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _serve():
    """Import everything, say ready, then answer fork requests until stdin closes; returns
    only in a forked child, with its request."""
    import gc
    import importlib
    # reaped in the handler: Python runs it between bytecodes, so also in the middle of a
    # seconds-long import below, and the lab learns how an engine died at once
    signal.signal(signal.SIGCHLD, lambda *_: _reap())
    for name in JOIN + REST:
        try:
            importlib.import_module(name)
        except Exception:     # the engine imports it again and reports the error
            pass
    # what the imports made stays out of every later collection, here and in the children:
    # a child's collection would otherwise touch (and so copy) every page of it
    gc.collect()
    gc.freeze()
    _say({"ready": True})
    buf = b""
    while True:
        chunk = os.read(0, 65536)
        if not chunk:
            os._exit(0)
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = json.loads(line)
            try:
                pid = os.fork()
            except OSError as e:
                _say({"id": req["id"], "error": f"fork failed: {e}"})
                continue
            if pid == 0:
                return req
            _say({"id": req["id"], "pid": pid})


def _become(req: dict) -> None:
    """In the forked child: turn into the engine the request describes."""
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDONLY)
    out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(devnull, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(devnull)
    os.close(out)
    os.environ.clear()
    os.environ.update(req["env"])
    if req.get("cwd"):
        os.chdir(req["cwd"])
    sys.argv = [sys.argv[0]] + list(req["args"])
    from nbtools.engine import boot
    boot.main()


def main() -> None:
    """The template's entry point (``python -m nbtools.engine.template``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # a terminal's Ctrl-C is the client's
    req = _serve()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _become(req)


if __name__ == "__main__":
    main()
