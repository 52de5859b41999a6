"""`nbtools view`: the runs of a history folder, or the profiler traces of a person's own
job (a Kineto .json/.json.gz per rank, or one file), as the run table; --html the offline
report, --perfetto (traces) every rank in one Chrome-trace file.

Outputs are checked before any work and never replace what is read (the traces, a saved
run) or a notebook without --force. Every line printed passes terminal_text: file names
and event names come from the person's files and may hold escape sequences."""
from __future__ import annotations

import os
from pathlib import Path

from nbtools.cli.checks import UserError, need_folder, need_outputs, one_line, say, write_failed
from nbtools.cli.table import TABLE_LEGEND, format_table

EXPLAIN = "columns: `nbtools view --explain ...` says what each one means"


def view(args) -> int:
    """Print the runs (or traces) at ``args.folder``, or two traces compared; the exit
    status (1: nothing could be shown, or no verdict where one was asked for)."""
    from nbtools.results.history import History
    from nbtools.analysis.summary import refresh_analysis
    paths = args.folder or ["nbtools-runs"]
    if len(paths) > 2:
        raise UserError(f"{len(paths)} paths: give one (a history folder, a folder of traces "
                        "or one trace file), or two traces to compare (A, then B)")
    if len(paths) == 2:
        return _compare_traces(*paths, args=args)
    args.folder = paths[0]
    traces = _holds_traces(args.folder)
    if args.rank is not None and (not traces or Path(args.folder).expanduser().is_dir()
                                  and len(_inputs(args.folder)) != 1):
        raise UserError("--rank: names the rank of one trace file; a folder's files say "
                        "theirs (distributedInfo, or rank-<N> in the name)")
    if traces:
        return _view_traces(args.folder, args)
    try:
        need_folder(args.folder, "history folder or trace file (.json, .json.gz)",
                    must_exist=True)
    except UserError as e:
        if ": no such " not in str(e):
            raise
        raise UserError(f"{e}; {_where_runs_come_from(args.folder)}") from None
    if args.perfetto:
        raise UserError(f"--perfetto: {args.folder} is a history folder; --perfetto takes "
                        "trace files. A saved run writes its own: History.load(folder)"
                        "[run_id].to_perfetto('run.json') (from nbtools.results.history "
                        "import History)")
    need_outputs([("--html", args.html)], force=args.force, histories=[args.folder])
    h = History.load(args.folder, nested=True)
    if h.nested:     # the tutorials' folders under nbtools-runs/: say whose runs these are
        say("runs from " + ", ".join(f"{name}/ ({n})" for name, n in h.nested)
            + (f" and {len(h) - sum(n for _, n in h.nested)} in {args.folder} itself"
               if len(h) > sum(n for _, n in h.nested) else ""), err=True)
    for r in h:      # histories saved by older versions get today's columns
        refresh_analysis(r)
    for name, why in h.damaged:   # listed, never in the way of the other runs
        say(f"damaged run folder {name}: {why}", err=True)
    for name, why in h.skipped:
        say(f"skipped run folder {name}: {why}", err=True)
    for r in h:
        for f in r.flags:
            if f.startswith("odd value: "):   # loaded, but not as it was saved: said here too
                say(f"run {r.run_id}: {f}", err=True)
    if not len(h):
        say(f"no runs in {args.folder}: {_where_runs_come_from(args.folder)}", err=True)
        return 1
    say(format_table(h.runs), TABLE_LEGEND if args.explain else EXPLAIN)
    if args.html:
        write_html(args.html, h.runs)
    return 0


def _where_runs_come_from(folder) -> str:
    """The next step from a folder with nothing to show: what would have put runs (or
    traces) there."""
    h = "" if str(folder).rstrip("/") == "nbtools-runs" else f" --history {folder}"
    return (f"save runs here with `python -m nbtools run{h}` (or `demo{h}`, or "
            f"Lab(history={str(folder)!r}) in Python); for your own job's profiler traces "
            "(a .json or .json.gz per rank) give their folder: `python -m nbtools view "
            "FOLDER`")


def _holds_traces(path) -> bool:
    """``path`` names a trace file (.json/.json.gz, whatever it turns out to be: the
    reader says what is wrong with it), or a folder with such names in it (a history
    folder holds run folders instead)."""
    from nbtools.trace.files import SUFFIXES
    p = Path(path).expanduser()
    if not p.is_dir():
        return p.name.endswith(SUFFIXES) and os.path.lexists(p)
    try:
        return any(e.name.endswith(SUFFIXES) and not e.is_dir() for e in os.scandir(p))
    except OSError:
        return False


def _inputs(path) -> list:
    """The files a trace path reads (for the output checks); none when it cannot be
    listed (the reader then says why)."""
    from nbtools.trace.files import trace_files
    from nbtools.trace.read_json import TraceError
    try:
        return trace_files(path)[0]
    except TraceError:
        return [Path(path).expanduser()]


def _view_traces(path, args) -> int:
    """Profiler traces from a person's own job (one Kineto JSON per rank, as torchrun with
    torch.profiler writes them): their table, and with --html the timeline of every rank on
    one clock in one offline file."""
    from nbtools.cli.table import TRACE_LEGEND
    from nbtools.analysis.straggler import attribute, verdict_text
    need_outputs([("--html", args.html), ("--perfetto", args.perfetto)],
                 inputs=_inputs(path), force=args.force)
    run = _load_good_traces(path, details=bool(args.html), rank=args.rank)  # tooltips where drawn
    say(format_table([run]))
    if run.events["rank"].nunique() > 1:      # who waited for whom in the collectives
        say(f"straggler: {verdict_text(attribute(run.events))}")
    why = run.why()
    for d in why:                             # why each rank's GPU waited, where the host was
        say(f"why: {d.text}")
    for g in why.gpu:                         # what its kernels computed, by kind and dtype
        say(f"gpu: {g.text}")
    say(TRACE_LEGEND if args.explain else EXPLAIN)
    if args.html:
        write_html(args.html, [run])
    if args.perfetto and not len(run.events):
        say(f"perfetto: {args.perfetto} not written: the traces hold no events", err=True)
    elif args.perfetto:
        try:
            out = run.to_perfetto(args.perfetto, force=True)   # checked above, --force too
        except OSError as e:
            raise write_failed(args.perfetto, e) from None
        say(f"perfetto: {out} (open it at https://ui.perfetto.dev: Open trace file; it stays "
            "in your browser)")
    return 0 if run.ok else 1


def _compare_traces(path_a, path_b, args) -> int:
    """Two traces (before and after a change): both tables, each one's straggler, and B
    against A on the profiled step and its parts, with the verdict on the profiled step's
    window from each side's steps (within-run noise only: said in its words). Sides that
    do not hold the same ranks get no verdict: a missing rank's file would otherwise decide
    it unseen."""
    from nbtools.analysis.straggler import attribute, verdict_text
    from nbtools.cli.table import TRACE_LEGEND, format_comparison
    from nbtools.results.comparison import Comparison
    if args.perfetto or args.rank is not None:
        raise UserError(f"{'--perfetto' if args.perfetto else '--rank'}: takes one trace "
                        "folder or file, not two to compare")
    for side, path in (("A", path_a), ("B", path_b)):
        if not _holds_traces(path):
            raise UserError(f"{path} ({side}): not a trace file or a folder of traces; two "
                            "paths compare two jobs' traces")
    need_outputs([("--html", args.html)], inputs=_inputs(path_a) + _inputs(path_b),
                 force=args.force)
    runs = [_load_good_traces(p, details=bool(args.html)) for p in (path_a, path_b)]
    a, b = runs
    say(format_table(runs))
    for side, run, path in (("A", a, path_a), ("B", b, path_b)):
        who = f"straggler: {verdict_text(attribute(run.events))}" \
            if run.events["rank"].nunique() > 1 else "one rank"
        say(f"{side} = {run.run_id} ({path}): {who}")
    why_not = _no_verdict(a, b)
    cmp = None if why_not else Comparison(a, b, metric="profiled_window_ms")
    say("", format_comparison(cmp) if cmp else f"no verdict: {why_not}",
        TRACE_LEGEND if args.explain else EXPLAIN)
    if args.html:
        from nbtools.report.html import export_html
        try:
            out = export_html(args.html, runs, notes="Written by `python -m nbtools view A B`.",
                              comparisons=[cmp] if cmp else [], force=True)   # checked first
        except OSError as e:
            raise write_failed(args.html, e) from None
        say(f"report: {out}")
    return 0 if cmp else 1


def _no_verdict(a, b) -> str:
    """Why A and B cannot be compared (a side with no events, or not the same ranks), or
    ""."""
    for side, run in (("A", a), ("B", b)):
        if not run.ok:
            return f"{side} has no events to compare (see its row)"
    ra, rb = (sorted(int(r) for r in run.events["rank"].unique()) for run in (a, b))
    wa, wb = a.world_size, b.world_size
    if ra != rb or len(ra) < wa or len(rb) < wb:
        return (f"A holds rank(s) {', '.join(map(str, ra))} of {wa}, B rank(s) "
                f"{', '.join(map(str, rb))} of {wb}: compare the traces of the same ranks, "
                "every rank of each job")
    return ""


def _load_good_traces(path, details: bool, rank=None):
    """The folder's traces as one run; a damaged file is left out and named in the run's
    flags (and on stderr) rather than losing the other ranks. An error about the set (two
    files holding one rank) or about every file stops with its one line. A trace that says
    no rank (a single process's profile), alone in its file or folder, is rank ``rank``,
    else 0, said in the flags."""
    from nbtools.results.load import RankUnknown, TraceError, load_traces
    from nbtools.trace.files import trace_files
    p = Path(path).expanduser()
    try:
        run = load_traces(path, rank=rank, details=details)
    except RankUnknown as e:
        files = trace_files(p)[0]
        if len(files) != 1:
            raise UserError(f"{e} (from the command line: rename the files rank-<N>.json, "
                            "or view one file with --rank N)") from None
        run = load_traces(path if not p.is_dir() else files, rank=0, details=details)
        run.flags.insert(0, f"{files[0].name}: the trace says no rank (no distributedInfo, "
                            "none in its name): shown as rank 0 (--rank N to say another)")
    except TraceError as e:
        if not p.is_dir():
            raise UserError(str(e)) from None
        run = _without_damaged(p, str(e), details)
    for f in run.flags:
        if _lost_input(f):
            say(f, err=True)
    return run


def _without_damaged(p: Path, first: str, details: bool):
    from nbtools.results.load import TraceError, load_traces
    from nbtools.trace.files import trace_files
    try:
        files, skipped = trace_files(p)
    except TraceError as e:
        raise UserError(str(e)) from None
    good, bad = [], []
    for f in files:
        try:
            load_traces(f, rank=0)   # only whether it reads: the set says each rank
        except TraceError as e:
            why = one_line(e)
            why = why[len(str(f)) + 2:] if why.startswith(f"{f}: ") else why
            bad.append(f"{f.name}: not read: {why}")
        else:
            good.append(f)
    if not bad or not good:
        raise UserError(first)
    try:
        run = load_traces(good, details=details)
    except TraceError as e:
        raise UserError(str(e)) from None
    run.flags[:0] = bad + [f"{q.name}: {why}" for q, why in skipped]
    return run


def _lost_input(flag: str) -> bool:
    """A flag that says part of the input was not shown (a file skipped or not read, events
    dropped or skipped, ranks missing, nothing to show): these go to stderr too."""
    return any(w in flag for w in (": not read: ", ": skipped", ": dropped",
                                   "have no trace here", "no events to show"))


def write_html(path, runs, comparisons=()) -> None:
    """Export ``runs`` (and ``comparisons``) to one offline HTML report at ``path`` and say
    where; an OSError becomes a one-line error naming the path."""
    from nbtools.report.html import export_html
    try:
        out = export_html(path, runs, notes="Written by `python -m nbtools`.",
                          comparisons=comparisons,
                          force=True)   # need_outputs checked it before the work, --force too
    except OSError as e:
        raise write_failed(path, e) from None
    say(f"report: {out}")
