"""An engine on another host: dies with its lab, through a TCP connection to the client.

A pid cannot be watched across hosts, and ipyparallel's SSH launcher starts engines in
their own session (hanging up ssh does not end them). So the engine holds a connection
to the client's lifeline (lab/hosts.py) on the ranks' network: the client closing it
(close(), a failed start) or the client's kernel dropping it (SIGKILL, OOM, a crash)
reaches the engine as end-of-file at once, and the engine takes itself and its children
down. The same connection tells the client the instant this engine dies.

``start()`` runs as part of the engine's startup command; NBTOOLS_LIFELINE is
``host:port:token``. Nothing here imports torch.
"""
from __future__ import annotations

import os
import shutil
import socket
import threading
import time

CONNECT_S = 30.0


def start() -> None:
    """On a remote engine: hold a socket open to the lab (NBTOOLS_LIFELINE) and exit when it
    closes, so an engine on another host never outlives its client."""
    spec = os.environ.get("NBTOOLS_LIFELINE", "")
    if not spec:
        return
    host, port, token = spec.rsplit(":", 2)
    sock = _connect(host, int(port))
    if sock is None:
        _die()      # the client is unreachable or gone: nobody would ever stop this engine
    sock.sendall(f"{token} {os.getpid()} {socket.gethostname()}\n".encode())
    threading.Thread(target=_hold, args=(sock,), name="nbtools-lifeline", daemon=True).start()


def _connect(host: str, port: int):
    deadline = time.monotonic() + CONNECT_S
    while time.monotonic() < deadline:
        try:
            return socket.create_connection((host, port), timeout=5)
        except OSError:
            time.sleep(0.2)
    return None


def _hold(sock) -> None:
    sock.settimeout(None)
    try:
        while sock.recv(64):
            pass
    except OSError:
        pass
    # the lab is gone: its per-host folder (profile, logs) goes with this host's engines
    folder = os.environ.get("NBTOOLS_REMOTE_DIR")
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
    _die()


def _die() -> None:
    from nbtools.engine import liveness
    liveness.die_with_children()
