"""widgets: what a panel's background thread writes goes into the panel, not the page.

A thread started from a click handler has no cell to write to: ipykernel tags its output
with the last request the kernel took (a widget's comm message), and JupyterLab puts such
output in its Log Console (raw widget reprs, engine lines). The panel's threads must not
print or display at all; this catches what the code they call still writes: ``print`` and
engine lines (sys.stdout / sys.stderr, by thread) and ``display()`` (ipykernel's
per-thread display hooks), handing each to ``sink`` (text) instead.
"""
from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Callable


class _ByThread:
    """sys.stdout or sys.stderr: writes from the captured threads go to their sink, all
    others to the stream it replaced (every other attribute is that stream's)."""

    def __init__(self, stream):
        self._stream, self._sinks = stream, {}

    def write(self, text: str):
        sink = self._sinks.get(threading.get_ident())
        if sink is None:
            return self._stream.write(text)
        sink(text)
        return len(text)

    def flush(self):
        if threading.get_ident() not in self._sinks:
            self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


_LOCK = threading.Lock()


def _router(name: str) -> _ByThread:
    current = getattr(sys, name)
    if not isinstance(current, _ByThread):
        current = _ByThread(current)
        setattr(sys, name, current)
    return current


def _unroute(name: str, router: _ByThread) -> None:
    if not router._sinks and getattr(sys, name) is router:
        setattr(sys, name, router._stream)


def _display_hook(sink: Callable[[str], None]):
    """ipykernel's display publisher: hooks are per thread and see every display message
    (display, update_display, clear_output) before it is sent; returning None drops it."""
    def hook(msg):
        data = (msg.get("content") or {}).get("data") or {}
        if msg.get("msg_type") == "display_data" and "text/plain" in data:
            sink(str(data["text/plain"]) + "\n")
        return None
    return hook


@contextmanager
def captured(sink: Callable[[str], None]):
    """Inside the block, this thread's prints, stream writes and displays call ``sink``
    with their text; other threads' output is untouched."""
    me = threading.get_ident()
    with _LOCK:
        routers = {n: _router(n) for n in ("stdout", "stderr")}
        for r in routers.values():
            r._sinks[me] = sink
    pub, hook = _display_publisher(), _display_hook(sink)
    if pub is not None:
        pub.register_hook(hook)
    try:
        yield
    finally:
        if pub is not None:
            pub.unregister_hook(hook)
        with _LOCK:
            for n, r in routers.items():
                r._sinks.pop(me, None)
                _unroute(n, r)


def _display_publisher():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    pub = getattr(get_ipython(), "display_pub", None)
    return pub if hasattr(pub, "register_hook") else None


class Stoppable:
    """Stop and wait for a panel part whose work runs in ``self.thread`` (Compare, Try,
    Explore): ``self._stop`` is the event the work checks between runs, ``self.stop_button``
    the button that says so."""

    def stop(self) -> None:
        """End the work after the run in progress; what finished is kept."""
        self._stop.set()
        self.stop_button.disabled = True
        self.stop_button.description = "stopping after this run…"

    def wait(self, timeout=None) -> None:
        """Until the work started by the button ends (tests, scripts)."""
        if self.thread is not None:
            self.thread.join(timeout)
