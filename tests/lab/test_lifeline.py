"""The lifeline (nbtools/lab/lifeline.py): each remote engine holds one connection to the lab
and ends itself on its end-of-file. Real sockets on loopback, the lab's own listener thread.

Seen in CI (test_hosts' stuck rank on host b): retiring a stuck engine closed its connection
behind the selector's back; the replacement engine's connection got the same fd, registering
it raised KeyError, the listener thread ended, and the new engine "never called back"."""
from __future__ import annotations

import socket
import time

from nbtools.lab.lifeline import Lifeline


def _connect(line: Lifeline, token: str, c: socket.socket | None = None) -> socket.socket:
    """An engine's side: connect and say (token pid host). ``c``: a socket made earlier,
    so that its fd is not the one the lab's side just freed."""
    c = c or socket.socket()
    c.connect(("127.0.0.1", line.port))
    c.sendall(f"{token} {1000 + len(token)} hostx\n".encode())
    return c


def _until(check, seconds: float = 5.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.02)
    return check()


def test_a_dropped_engine_gets_eof_and_the_next_one_is_still_heard():
    line = Lifeline("127.0.0.1")
    try:
        first = _connect(line, "aaaa")
        got = _until(lambda: line.get("aaaa"))
        assert got and got["alive"] and got["host"] == "hostx"
        fd = got["conn"].fileno()
        made = [socket.socket() for _ in range(3)]   # the next engines' fds, taken now
        line.drop("aaaa")
        first.settimeout(5)
        assert first.recv(16) == b""                 # the engine reads its end-of-file
        assert _until(lambda: not line.get("aaaa")["alive"])
        # the next engines' connections: the lab's side of the first gets the freed fd
        later = [_connect(line, f"b{i:03d}", c) for i, c in enumerate(made)]
        for i in range(3):
            assert _until(lambda: line.get(f"b{i:03d}")), f"engine b{i:03d} never heard"
        assert fd in {line.get(f"b{i:03d}")["conn"].fileno() for i in range(3)}, \
            "the freed fd was not reused: the case is not exercised"
        later[0].close()                            # an engine that dies is seen dead
        assert _until(lambda: not line.get("b000")["alive"])
        for c in later[1:] + [first]:
            c.close()
    finally:
        line.close()
    assert not line.thread.is_alive()      # a closed lifeline leaves no thread behind
