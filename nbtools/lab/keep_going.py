"""A failed run among many: kept, said, and the next one runs. The lab's sweeps, the CLI's
``run``/``demo`` and the claim studies all go on after a failure through ``run_or_keep``."""
from __future__ import annotations

from typing import Callable, Optional

from nbtools.results.errors import RunFailed


def run_or_keep(lab, checked, on_failure: Optional[Callable] = None, timeout=None):
    """``lab.run(checked)`` (a Lab.check result, or anything lab.run takes), returning a
    failed or timed-out Run instead of raising: it holds the errors and is in lab.history
    too, and ``on_failure(error)`` says it the caller's way first. Nothing is restarted
    here: the lab heals or restarts its engines before its next run (recovery.before_run).
    ``timeout`` bounds this run (default: the lab's).
    A ConfigError still raises: nothing ran."""
    try:
        return lab.run(checked, timeout=timeout) if timeout is not None else lab.run(checked)
    except RunFailed as e:
        if on_failure is not None:
            on_failure(e)
        return e.run
