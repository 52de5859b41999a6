"""common: work a Ctrl-C must not cut in two: a finished run being assembled and saved, the
bookkeeping after an interrupted one. Until issue 44 a Ctrl-C there left a run ``ok`` in
``lab.history`` but missing on disk, and a second one left the process group broken for
the next run.

``held()`` holds SIGINT while its block runs and delivers it when the block ends, as a
KeyboardInterrupt carrying what the block says it kept. A third Ctrl-C is the way out of a
block that cannot finish (a disk that hangs): it is raised at once. Only the main thread
gets SIGINT (Python delivers KeyboardInterrupt nowhere else), so elsewhere nothing is held.
"""
from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager

GIVE_UP = 3     # the Ctrl-C that is raised at once, whatever is held


class Held:
    """What a ``held()`` block saw: ``count`` Ctrl-Cs; ``message`` is what the delivered
    KeyboardInterrupt says (the block sets it to what it kept); ``run`` rides along on it."""

    def __init__(self, holding: bool, note: str):
        self.count, self.holding, self.note, self.noted = 0, holding, note, False
        self.message, self.run = "", None

    def hold(self) -> None:
        """From now on a Ctrl-C waits for the block's end (``held(holding=False)`` raised it
        at once until here)."""
        self.holding = True

    def __bool__(self) -> bool:
        return self.count > 0


@contextmanager
def held(note: str = "", holding: bool = True):
    """Hold Ctrl-C (SIGINT) for the block; yields a Held. ``note`` is said on stderr at the
    first Ctrl-C held (what is being finished). ``holding=False``: Ctrl-C raises as usual
    until ``Held.hold()``; the first one raised also starts holding, so the code that
    handles it cannot be cut by the next. When the block ends without an exception and a
    Ctrl-C came, KeyboardInterrupt(message) is raised (a surrounding ``held`` block counts
    it instead)."""
    h = Held(holding, note)
    old = signal.getsignal(signal.SIGINT) if threading.current_thread() is \
        threading.main_thread() else None
    if old is None or old == signal.SIG_IGN:
        # not the main thread, a handler set from C we could not restore, or a process that
        # ignores Ctrl-C (started in the background): nothing to hold
        yield h
        return

    def on_sigint(signum, frame):
        h.count += 1
        if not h.holding:
            h.holding = True
            raise KeyboardInterrupt
        if h.count >= GIVE_UP:
            raise KeyboardInterrupt(f"Ctrl-C {h.count} times: {h.note or 'the work'} was "
                                    "abandoned part-way")
        if h.note and not h.noted:
            h.noted = True
            # os.write, not print: a handler may run while the stream's own lock is held
            os.write(2, f"Ctrl-C: {h.note}; then it stops (Ctrl-C {GIVE_UP - h.count} more "
                        "time(s) to abandon it)\n".encode(errors="replace"))

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield h
    finally:
        signal.signal(signal.SIGINT, old)
    if h.count:
        _deliver(old, h)


def _deliver(old, h: Held) -> None:
    if old is signal.default_int_handler:
        e = KeyboardInterrupt(h.message) if h.message else KeyboardInterrupt()
        e.run = h.run
        raise e
    if callable(old):         # a surrounding held block (or the program's own handler)
        old(signal.SIGINT, None)
    elif old == signal.SIG_DFL:
        os.kill(os.getpid(), signal.SIGINT)
