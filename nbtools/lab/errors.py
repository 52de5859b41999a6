"""What a Lab raises: a run that failed or timed out, a lab that was closed."""
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


def check_usable(lab) -> None:
    """Say why the lab cannot run, truthfully: closed by the user, or stopped. (Engines
    left stuck or dead by a run are healed by recovery.before_run, not refused.)"""
    where = (f" (the history is kept in {lab.history.folder}: Lab(history=...) loads it)"
             if lab.history.folder is not None else "")
    if lab.closed:
        raise LabClosed("this lab is closed (lab.close() stopped its engines); start a "
                        "new one with lab = Lab()" + where + ", or lab.restart() for "
                        "fresh engines in this one")
    if lab.client is None:
        raise RuntimeError("the lab's engines are stopped; call lab.restart() for fresh "
                           "ones (history is kept)")
