"""What the engines print, sorted for a person: library warnings apart from the rest.

DDP's "Grad strides do not match bucket view strides" (every compiled ddp-train run, every
rank) and its kind are not errors; shown as red stderr blocks per rank they bury what is.
Python warnings raised during a run come back as data (engine.run records them); c10's
own warning lines are picked out of stderr here. Both are shown folded under the run (a
``<details>`` block, which also survives an HTML export); everything else on stderr —
tracebacks, errors, a user's prints — stays in view. Pure text in, text out, except ``show``.
"""
from __future__ import annotations

import html
import re

# c10's TORCH_WARN / torch._logging at WARNING: "[W1201 00:12:13.45 ...] ..." and
# "W1201 00:12:13 ...". INFO lines (c10d's "DDP Initialized with:" block) stay in view.
_GLOG_WARNING = re.compile(r"^\[?W\d{4} \d\d:\d\d:\d\d")


# Kineto's line on the first profiled run of an engine: torch registered its profiler client
# on the thread that imported torch (the engine's warm-up thread, engine/liveness.py), and
# the profiler starts on the engine's main thread. torch's client has nothing to initialise
# (its init() is empty), so nothing is lost. Initialising Kineto early on the warm-up
# thread would silence it, but newer torch decides there whether Kineto traces GPUs from
# the activities asked for, so a CPU-only start could cost the GPU trace.
_KINETO_THREAD = re.compile(r"^ERROR: External init callback must run in same thread as "
                            r"registerClient")
KINETO_NOTE = ("Kineto (the profiler's library) notes that torch was imported on another "
               "thread than the one profiling (the engine imports torch in the background "
               "to start sooner). Harmless: torch's profiler has nothing to set up there, "
               "and the trace is complete.")


def split(lines: list) -> tuple[list, list]:
    """(lines to show, warning lines) of one rank's stderr."""
    show, warn = [], []
    for line in lines:
        if _KINETO_THREAD.match(line):
            warn.append(KINETO_NOTE)
        else:
            (warn if _GLOG_WARNING.match(line) else show).append(line)
    return show, warn


def from_report(rows) -> list:
    """engine.run's warning rows -> one text per warning."""
    return [f"{w.get('category', 'Warning')}: {w.get('message', '')} ({w.get('where', '')})"
            for w in rows or ()]


def _groups(by_rank: dict) -> dict:
    """Identical warnings on several ranks once, with the ranks that gave them."""
    groups: dict = {}
    for r, texts in sorted(by_rank.items()):
        for t in dict.fromkeys(texts or ()):
            groups.setdefault(t, []).append(r)
    return groups


def warnings_html(by_rank: dict) -> str:
    """rank -> warning texts, as one folded block."""
    groups = _groups(by_rank)
    if not groups:
        return ""
    body = "".join(f"<div><b>rank {', '.join(map(str, ranks))}</b><pre style='white-space:"
                   f"pre-wrap;font-size:11px;margin:2px 0'>{html.escape(text)}</pre></div>"
                   for text, ranks in groups.items())
    return (f"<details class='nbtools-engine-warnings'><summary style='color:#666'>engine "
            f"output: {len(groups)} library warning(s), not errors (click to show)</summary>"
            f"{body}</details>")


def warnings_text(by_rank: dict) -> str:
    """The same for a terminal: each distinct warning once."""
    return "".join(f"[rank {', '.join(map(str, ranks))}] {text}\n"
                   for text, ranks in _groups(by_rank).items())


def show(by_rank: dict) -> None:
    """After a run: folded HTML in a notebook, plain lines on a terminal's stderr."""
    if not any(by_rank.values()):
        return
    try:
        from IPython import get_ipython
        kernel = getattr(get_ipython(), "kernel", None) is not None
    except ImportError:
        kernel = False
    if kernel:
        from IPython.display import HTML, display
        display(HTML(warnings_html(by_rank)))
    else:
        import sys
        sys.stderr.write(warnings_text(by_rank))
