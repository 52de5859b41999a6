"""Whether a lab can take a run, and if not why: closed by the user, or stopped."""
from __future__ import annotations

from nbtools.results.errors import LabClosed


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
