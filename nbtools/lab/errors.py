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
