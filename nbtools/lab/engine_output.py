"""What the engines print, sorted for a person: library warnings apart from the rest.

DDP's "Grad strides do not match bucket view strides" (every compiled ddp-train run, every
rank) and its kind are not errors; shown as red stderr blocks per rank they bury what is.
Python warnings raised during a run come back as data (engine.run records them); c10's
own warning lines are picked out of stderr here. Both are shown folded under the run, one
line per kind with its count (a ``<details>`` block in a notebook, which also survives an
HTML export; the full texts are in ``lab.engine_warnings``); everything else on stderr —
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


def kind(text: str) -> str:
    """A warning's kind: its first line with numbers, addresses and quoted names folded
    (DDP's "Grad strides" warning differs per parameter in its shapes; the profiler's
    "record function ... will be ignored" in the function's name)."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    first = re.sub(r"\s+\([^()]*:\d+\)$", "", first)           # " (file.py:829)" of from_report
    first = re.sub(r"'[^']*'|\"[^\"]*\"|`[^`]*`", "…", first)
    first = re.sub(r"0x[0-9a-fA-F]+|-?\d+(\.\d+)?", "N", first)
    return first


def _kinds(by_rank: dict) -> dict:
    """kind -> (ranks that gave it, how many times in all, the distinct full texts)."""
    out: dict = {}
    for r, texts in sorted(by_rank.items()):
        for t in texts or ():
            ranks, n, full = out.setdefault(kind(t), ([], [0], {}))
            if r not in ranks:
                ranks.append(r)
            n[0] += 1
            full[t] = None
    return {k: (ranks, n[0], list(full)) for k, (ranks, n, full) in out.items()}


def _short(text: str, width: int = 110) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    more = len(first) > width or len(text.strip().splitlines()) > 1
    return (first[:width].rstrip() + " …") if more else first


def warnings_html(by_rank: dict) -> str:
    """rank -> warning texts, as one folded block: a line per kind with its count, the full
    texts under each."""
    kinds = _kinds(by_rank)
    if not kinds:
        return ""
    body = "".join(
        f"<details><summary style='font-size:11px'><b>rank {', '.join(map(str, ranks))}</b> "
        f"{n} x {html.escape(_short(full[0]))}</summary>"
        + "".join(f"<pre style='white-space:pre-wrap;font-size:11px;margin:2px 0'>"
                  f"{html.escape(t)}</pre>" for t in full)
        + "</details>"
        for ranks, n, full in kinds.values())
    return (f"<details class='nbtools-engine-warnings'><summary style='color:#666'>engine "
            f"output: {len(kinds)} library warning(s), not errors (click to show)</summary>"
            f"{body}</details>")


def warnings_text(by_rank: dict) -> str:
    """The same for a terminal: one line per kind with its count; the full texts are kept
    for ``lab.engine_warnings`` (or NBTOOLS_WARNINGS=full prints them)."""
    import os
    kinds = _kinds(by_rank)
    if not kinds:
        return ""
    if os.environ.get("NBTOOLS_WARNINGS") == "full":
        return "".join(f"[rank {', '.join(map(str, ranks))}] {n} x {t}\n"
                       for ranks, n, full in kinds.values() for t in full)
    lines = [f"[rank {', '.join(map(str, ranks))}] {n} x {_short(full[0])}"
             for ranks, n, full in kinds.values()]
    return ("\n".join(lines) + "\n   (library warnings, not errors; full text: "
            "lab.engine_warnings, or NBTOOLS_WARNINGS=full)\n")


def show(by_rank: dict) -> None:
    """After a run: folded HTML in a notebook, a line per kind on a terminal's stderr."""
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
