"""What a Lab raises: a run that failed or timed out, a lab that was closed. Here, below the
lab, so that the views that say them (ui/html.py) and the code that catches them need no lab."""
from __future__ import annotations


class RunFailed(RuntimeError):
    """A run failed on one or more ranks; ``.run`` holds it (also kept in lab.history)."""

    def __init__(self, msg, run):
        super().__init__(msg)
        self.run = run


class RunTimeout(RunFailed):
    """Some ranks did not finish in time; their engines are replaced before the next run."""


class LabClosed(RuntimeError):
    """lab.close() was called: its engines are gone; a new Lab() continues (history kept)."""



# what a rank says when it stopped because another one failed: not the cause
PEER_SIGNS = ("stopped because a peer failed", "Connection closed by peer", "Connection reset",
              "process group is broken", "NCCL communicator was aborted")


def root_cause(errors: dict) -> str:
    """rank -> error text -> the root cause first: the first line of the error of the
    lowest rank whose error is its own, not a peer's abort, and which ranks stopped with it
    ('' when no rank failed)."""
    own = {r: e for r, e in errors.items() if not any(s in e for s in PEER_SIGNS)}
    pick = own or errors
    if not pick:
        return ""
    r = min(pick)
    others = sorted(set(errors) - {r})
    tail = f" (rank(s) {others} stopped with it)" if others else ""
    return f"rank {r}: {pick[r].splitlines()[0]}{tail}. "
