"""The lab's side of the lifeline (the engine's side is nbtools/engine/lifeline.py): one
listening socket on the ranks' network, one connection per remote engine, which says
(token pid host) and holds the connection open; a closed connection is a dead engine, and
an engine whose connection the lab ends ends itself. One thread owns the selector."""
from __future__ import annotations

import selectors
import socket
import threading
from typing import Optional


class Lifeline:
    """Client side: one listening socket on the ranks' network; each remote engine holds a
    connection (token pid hostname). A closed connection is a dead engine."""

    def __init__(self, addr: str):
        self.sock = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
        self.sock.bind((addr, 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.engines: dict = {}       # token -> dict(pid, host, conn, alive)
        self.lock = threading.Lock()
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.sock, selectors.EVENT_READ)
        self.closed = False
        self._drop: list = []         # connections to end, closed by the loop (it owns sel)
        self.thread = threading.Thread(target=self._loop, name="nbtools-lifeline", daemon=True)
        self.thread.start()

    def drop(self, token: str) -> None:
        """End the connection of the engine holding ``token`` (it ends itself on the
        end-of-file). Closed by the loop thread, which unregisters it first: a socket
        closed behind the selector's back left its fd's key there, the next engine's
        connection got that fd, and registering it raised KeyError and ended the loop,
        so no engine after it was ever heard from (CI: "it never called back")."""
        with self.lock:
            e = self.engines.get(token)
            if e is not None:
                self._drop.append(e["conn"])

    def _end(self, conn, buffers: dict) -> None:
        try:
            self.sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        buffers.pop(conn, None)
        conn.close()
        with self.lock:
            for e in self.engines.values():
                if e["conn"] is conn:
                    e["alive"] = False

    def _loop(self) -> None:
        buffers: dict = {}
        while not self.closed:
            with self.lock:
                ending, self._drop = self._drop, []
            for conn in ending:
                self._end(conn, buffers)
            try:
                events = self.sel.select(0.2 if not ending else 0)
            except (OSError, ValueError):
                return
            for key, _ in events:
                if key.fileobj is self.sock:
                    try:
                        conn, _ = self.sock.accept()
                    except OSError:
                        continue
                    _keepalive(conn)
                    buffers[conn] = b""
                    try:
                        self.sel.register(conn, selectors.EVENT_READ)
                    except KeyError:    # a socket closed elsewhere left this fd's key
                        self.sel.unregister(conn.fileno())
                        self.sel.register(conn, selectors.EVENT_READ)
                    continue
                conn = key.fileobj
                try:
                    data = conn.recv(256)
                except OSError:
                    data = b""
                if data:
                    buffers[conn] += data
                    if b"\n" in buffers[conn]:
                        token, pid, host = buffers[conn].split(b"\n")[0].decode().split()
                        with self.lock:
                            self.engines[token] = dict(pid=int(pid), host=host, conn=conn,
                                                       alive=True)
                    continue
                self._end(conn, buffers)

    def get(self, token: str) -> Optional[dict]:
        """What the engine holding ``token`` said when it connected (host, pid), or None yet."""
        with self.lock:
            return self.engines.get(token)

    def close(self) -> None:
        """Every engine holding a connection ends itself on the end-of-file."""
        self.closed = True
        with self.lock:
            for e in self.engines.values():
                try:
                    e["conn"].close()
                except OSError:
                    pass
        self.sock.close()
        # a closed lifeline leaves no thread behind (it wakes within 0.2 s to see closed)
        if self.thread is not threading.current_thread():
            self.thread.join(timeout=2.0)


def _keepalive(conn) -> None:
    """A host that loses power sends no end-of-file: TCP keepalive probes find it gone
    (about 11 s: 5 s idle, 3 probes 2 s apart) where the platform allows setting them."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, value in (("TCP_KEEPIDLE", 5), ("TCP_KEEPINTVL", 2), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, opt):
            conn.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)
