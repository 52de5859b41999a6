"""What the engines print, sorted for a person: library log lines apart from the rest.

DDP's "Grad strides do not match bucket view strides" (every compiled ddp-train run, every
rank) and its kind are not errors; shown as red stderr blocks per rank they bury what is.
Python warnings raised during a run come back as data (engine.run records them); c10's
own log lines (warnings, and info where TORCH_CPP_LOG_LEVEL=INFO asks for it) are picked
out of stderr here. Both are folded: one line per kind with its count, each kind said once
per lab, the first time a run meets it (a ``<details>`` block in a notebook, which also
survives an HTML export); the full texts are in ``lab.engine_log`` (every run) and
``lab.engine_warnings`` (the last run). Everything else on stderr — tracebacks, errors,
a user's prints — stays in view. Pure text in, text out, except ``show``.
"""
from __future__ import annotations

import html
import os
import re
import sys
from typing import Optional

# c10's log lines: "[W1201 00:12:13.45 file.cpp:12] ..." and "W1201 00:12:13 ...", once the
# process group is up prefixed with the rank ("[rank0]:[W1204 ...]"). Warnings (W) and
# info (I: TORCH_CPP_LOG_LEVEL=INFO, c10d's "[c10d] The debug level is set to INFO.") fold;
# errors (E, F) stay in view.
_LOG_LINE = re.compile(r"^(\[rank\d+\]:)?\[?[IW]\d{4} \d\d:\d\d:\d\d")
# A log line that announces a list (c10d's "DDP Initialized with:") owns the "key: value"
# lines under it (lower-case keys: "broadcast_buffers: 1"), up to the blank line that ends
# the list; any other line (a traceback, "RuntimeError: ...", a print) ends it and is read
# as itself
_OPENS_LIST = re.compile(r":\s*$")
_LIST_ITEM = re.compile(r"^[a-z_][a-z0-9_]*:( |$)")


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
    """(lines to show, log records) of one rank's stderr lines, read at once."""
    splitter = Splitter()
    show, _ = splitter.feed(lines)
    splitter.close()
    return show, splitter.records


class Splitter:
    """One rank's stderr, read as it arrives: each line goes to the person (``show``) or is a
    library log record (folded). A record announcing a list takes the lines under it, even
    when they arrive in a later read, up to the blank line that ends it."""

    def __init__(self):
        self.records: list = []       # every record so far, in full
        self._open: Optional[list] = None

    def feed(self, lines) -> tuple[list, list]:
        """(lines to show, records completed by these lines)."""
        show, done = [], []
        for line in lines:
            if self._open is not None:
                if _LIST_ITEM.match(line):
                    self._open.append(line)
                    continue
                done.append("\n".join(self._open))
                self._open = None
                if not line.strip():
                    continue          # the blank line that ends the list is the record's
            if _KINETO_THREAD.match(line):
                done.append(KINETO_NOTE)
            elif _LOG_LINE.match(line):
                if _OPENS_LIST.search(line):
                    self._open = [line]
                else:
                    done.append(line)
            else:
                show.append(line)
        self.records.extend(done)
        return show, done

    def close(self) -> list:
        """The run ended: a list left open is a record as it stands."""
        if self._open is None:
            return []
        last, self._open = "\n".join(self._open), None
        self.records.append(last)
        return [last]


def from_report(rows) -> list:
    """engine.run's warning rows -> one text per warning."""
    return [f"{w.get('category', 'Warning')}: {w.get('message', '')} ({w.get('where', '')})"
            for w in rows or ()]


def kind(text: str) -> str:
    """A log line's kind: its first line with the log header, numbers, addresses and quoted
    names folded (DDP's "Grad strides" warning differs per parameter in its shapes; the
    profiler's "record function ... will be ignored" in the function's name; every c10 line
    in its time and, once the group is up, its rank)."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    first = _HEADER.sub("", first)
    first = re.sub(r"\s+\([^()]*:\d+\)$", "", first)           # " (file.py:829)" of from_report
    first = re.sub(r"'[^']*'|\"[^\"]*\"|`[^`]*`", "…", first)
    first = re.sub(r"0x[0-9a-fA-F]+|-?\d+(\.\d+)?", "N", first)
    return first


# "[rank0]:[W1204 20:25:52.871576553 reducer.cpp:132] " (the source line stays: it names
# where the message comes from; its number goes with the other numbers)
_HEADER = re.compile(r"^(\[rank\d+\]:)?(\[?)([IWEF])\d{4} [\d:.]+( +\d+)? ")


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


class EngineLog:
    """Every library log line of a lab's runs, by kind (``lab.engine_log``): what the
    folded lines after each run stand for. Each kind is said once per lab, the first time
    a run meets it; later runs only count it here. Shown (``print(lab.engine_log)``, or a
    cell): every kind with its count, ranks, runs and distinct full texts."""

    KEEP = 20       # distinct full texts kept per kind (a kind repeats with new numbers)

    def __init__(self):
        self.kinds: dict = {}     # kind -> dict(ranks, n, texts, runs)

    def add(self, by_rank: dict, run_id: str = "") -> dict:
        """Count a run's log lines (rank -> texts); returns rank -> texts of the kinds this
        lab had not met before (what is said after the run)."""
        new: dict = {}
        for k, (ranks, n, full) in _kinds(by_rank).items():
            seen = self.kinds.get(k)
            if seen is None:
                seen = self.kinds[k] = dict(ranks=[], n=0, texts=[], runs=[])
                for r, texts in by_rank.items():
                    new.setdefault(r, []).extend(t for t in texts or () if kind(t) == k)
            seen["n"] += n
            seen["ranks"] = sorted(set(seen["ranks"]) | set(ranks))
            seen["texts"] += [t for t in full if t not in seen["texts"]][
                :max(0, self.KEEP - len(seen["texts"]))]
            if run_id and run_id not in seen["runs"]:
                seen["runs"].append(run_id)
        return {r: t for r, t in new.items() if t}

    def __len__(self) -> int:
        return len(self.kinds)

    def __str__(self) -> str:
        if not self.kinds:
            return "no library log lines from the engines"
        return "\n\n".join(
            f"[rank {', '.join(map(str, k['ranks']))}] {k['n']} x in {len(k['runs'])} run(s)"
            f" ({', '.join(k['runs'][-5:])}):\n" + "\n".join(k["texts"])
            for k in self.kinds.values())

    __repr__ = __str__

    def _repr_html_(self) -> str:
        if not self.kinds:
            return "<i>no library log lines from the engines</i>"
        return "".join(
            f"<details><summary><b>rank {', '.join(map(str, k['ranks']))}</b> {k['n']} x "
            f"{html.escape(_short(k['texts'][0]))} ({len(k['runs'])} run(s))</summary>"
            + "".join(f"<pre style='white-space:pre-wrap;font-size:11px;margin:2px 0'>"
                      f"{html.escape(t)}</pre>" for t in k["texts"]) + "</details>"
            for k in self.kinds.values())


def _short(text: str, width: int = 110) -> str:
    """A log text's first line, its time and rank prefix left out (its level and source
    stay: "[I reducer.cpp:132] Reducer initialized ..."), cut to ``width``."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    first = _HEADER.sub(lambda m: f"{m.group(2)}{m.group(3)} ", first)
    more = len(first) > width or len(text.strip().splitlines()) > 1
    return (first[:width].rstrip() + " …") if more else first


def warnings_html(by_rank: dict) -> str:
    """rank -> log texts, as one folded block: a line per kind with its count, the full
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
            f"output: {len(kinds)} library warning(s), not errors, each kind said once per "
            f"lab; all of them: lab.engine_log (click to show)</summary>{body}</details>")


def warnings_text(by_rank: dict) -> str:
    """The same for a terminal: one line per kind with its count; the full texts are kept
    in ``lab.engine_log`` (or NBTOOLS_WARNINGS=full prints them)."""
    kinds = _kinds(by_rank)
    if not kinds:
        return ""
    if os.environ.get("NBTOOLS_WARNINGS") == "full":
        return "".join(f"[rank {', '.join(map(str, ranks))}] {n} x {t}\n"
                       for ranks, n, full in kinds.values() for t in full)
    lines = [f"[rank {', '.join(map(str, ranks))}] {n} x {_short(full[0])}"
             for ranks, n, full in kinds.values()]
    return ("\n".join(lines) + "\n   (library log lines, not errors; each kind is said once "
            "per lab: lab.engine_log has them all, NBTOOLS_WARNINGS=full prints them)\n")


def to_say(log: EngineLog, by_rank: dict, run_id: str = "") -> dict:
    """Count a run's log lines (rank -> texts) in the lab's ``log``; returns what to say
    after the run: the kinds the lab had not met yet (NBTOOLS_WARNINGS=full: all of them)."""
    new = log.add(by_rank, run_id)
    return by_rank if os.environ.get("NBTOOLS_WARNINGS") == "full" else new


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
        from nbtools.lab.progress_view import clear_line
        clear_line()
        sys.stderr.write(warnings_text(by_rank))
