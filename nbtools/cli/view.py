"""`nbtools view`: the runs of a history folder, or the profiler traces of a person's own
job (a Kineto .json/.json.gz per rank, or one file), as the run table; --html the offline
report, --perfetto (traces) every rank in one Chrome-trace file."""
from __future__ import annotations

import sys

from nbtools.cli.checks import UserError, need_folder, need_writable_parent, one_line
from nbtools.cli.table import TABLE_LEGEND, format_table


def view(args) -> int:
    """Print the runs (or traces) at ``args.folder``, or two traces compared; the exit
    status."""
    from nbtools.results.history import History
    from nbtools.analysis.summary import refresh_analysis
    need_writable_parent(args.html)
    need_writable_parent(args.perfetto)
    paths = args.folder or ["nbtools-runs"]
    if len(paths) > 2:
        raise UserError(f"{len(paths)} paths: give one (a history folder, a folder of traces "
                        "or one trace file), or two traces to compare (A, then B)")
    if len(paths) == 2:
        return _compare_traces(*paths, html=args.html, perfetto=args.perfetto, rank=args.rank)
    args.folder = paths[0]
    if _trace_files_here(args.folder):
        return _view_traces(args.folder, args.html, args.perfetto, args.rank)
    if args.rank is not None:
        raise UserError("--rank: names the rank of one trace file; a folder's files say "
                        "theirs (distributedInfo, or rank-<N> in the name)")
    need_folder(args.folder, "history folder or trace file (.json, .json.gz)",
                 must_exist=True)
    h = History.load(args.folder)
    if not len(h) and not h.damaged and _trace_files_here(args.folder, folder=True):
        return _view_traces(args.folder, args.html, args.perfetto)
    if args.perfetto:
        raise UserError(f"--perfetto: {args.folder} is a history folder; --perfetto takes "
                        "trace files. A saved run writes its own: History.load(folder)"
                        "[run_id].to_perfetto('run.json') (from nbtools.results.history "
                        "import History)")
    for r in h:      # histories saved by older versions get today's columns
        refresh_analysis(r)
    for name, why in h.damaged:   # listed, never in the way of the other runs
        print(f"damaged run folder {name}: {why}", file=sys.stderr)
    if not len(h):
        print(f"no runs in {args.folder}", file=sys.stderr)
        return 1
    print(format_table(h.runs))
    print(TABLE_LEGEND)
    if args.html:
        write_html(args.html, h.runs)
    return 0


def _trace_files_here(path, folder: bool = False) -> bool:
    """``path`` is a trace file (.json/.json.gz), or with ``folder`` a folder holding them
    (a history folder holds run folders instead)."""
    from pathlib import Path
    p = Path(path).expanduser()
    is_trace = lambda q: q.is_file() and q.name.endswith((".json", ".json.gz"))
    if not folder:
        return is_trace(p)
    return p.is_dir() and any(is_trace(q) for q in p.iterdir())


def _view_traces(path, html, perfetto=None, rank=None) -> int:
    """Profiler traces from a person's own job (one Kineto JSON per rank, as torchrun with
    torch.profiler writes them): their table, and with --html the timeline of every rank on
    one clock in one offline file."""
    from nbtools.cli.table import TRACE_LEGEND
    from nbtools.analysis.straggler import attribute, verdict_text
    run = _load_good_traces(path, details=bool(html), rank=rank)  # tooltips where drawn
    print(format_table([run]))
    if run.events["rank"].nunique() > 1:      # who waited for whom in the collectives
        print(f"straggler: {verdict_text(attribute(run.events))}")
    print(TRACE_LEGEND)
    if html:
        write_html(html, [run])
    if perfetto:
        print(f"perfetto: {run.to_perfetto(perfetto)} (open it at https://ui.perfetto.dev: "
              "Open trace file; it stays in your browser)")
    return 0


def _compare_traces(path_a, path_b, html=None, perfetto=None, rank=None) -> int:
    """Two traces (before and after a change): both tables, each one's straggler, and B
    against A on the profiled step and its parts, with the verdict on the profiled step's
    window from each side's steps (within-run noise only: said in its words)."""
    from nbtools.analysis.straggler import attribute, verdict_text
    from nbtools.cli.table import TRACE_LEGEND, format_comparison
    from nbtools.results.comparison import Comparison
    if perfetto or rank is not None:
        raise UserError(f"{'--perfetto' if perfetto else '--rank'}: takes one trace folder or "
                        "file, not two to compare")
    runs = []
    for side, path in (("A", path_a), ("B", path_b)):
        if not (_trace_files_here(path) or _trace_files_here(path, folder=True)):
            raise UserError(f"{path} ({side}): not a trace file or a folder of traces; two "
                            "paths compare two jobs' traces")
        runs.append(_load_good_traces(path, details=bool(html)))
    a, b = runs
    print(format_table(runs))
    for side, run, path in (("A", a, path_a), ("B", b, path_b)):
        who = f"straggler: {verdict_text(attribute(run.events))}" \
            if run.events["rank"].nunique() > 1 else "one rank"
        print(f"{side} = {run.run_id} ({path}): {who}")
    cmp = Comparison(a, b, metric="profiled_window_ms")
    print()
    print(format_comparison(cmp))
    print(TRACE_LEGEND)
    if html:
        from nbtools.report.html import export_html
        out = export_html(html, runs, notes="Written by `python -m nbtools view A B`.",
                          comparisons=[cmp])
        print(f"report: {out}")
    return 0


def _load_good_traces(path, details: bool, rank=None):
    """The folder's traces as one run; a damaged file is left out and named in the run's
    flags (and on stderr) rather than losing the other ranks. An error about the set (two
    files holding one rank) or about every file stops with its one line. One file that says
    no rank (a single process's profile) is rank ``rank``, else 0, said in the flags."""
    from pathlib import Path
    from nbtools.results.load import RankUnknown, TraceError, load_traces
    try:
        return load_traces(path, rank=rank, details=details)
    except RankUnknown as e:
        if Path(path).expanduser().is_dir():
            raise UserError(f"{e} (from the command line: rename the files rank-<N>.json, "
                            "or view one file with --rank N)") from None
        run = load_traces(path, rank=0, details=details)
        run.flags.insert(0, f"{Path(path).name}: the trace says no rank (no distributedInfo, "
                            "none in its name): shown as rank 0 (--rank N to say another)")
        return run
    except TraceError as e:
        p, first = Path(path).expanduser(), str(e)
    if not p.is_dir():
        raise UserError(first)
    good, bad = [], []
    for f in sorted(q for q in p.iterdir() if _trace_files_here(q)):
        try:
            load_traces(f)
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
    for line in bad:
        print(f"damaged trace {line}", file=sys.stderr)
    run.flags[:0] = bad
    return run


def write_html(path, runs) -> None:
    from nbtools.report.html import export_html
    out = export_html(path, runs, notes="Written by `python -m nbtools`.")
    print(f"report: {out}")
