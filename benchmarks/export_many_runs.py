"""How long `export_html` takes, and how large its file is, as the history grows.

    python benchmarks/export_many_runs.py [--runs 5,22,50] [--repeats 3]
    python benchmarks/export_many_runs.py --history DIR [--fill] --runs 22 --repeats 3

Without ``--history`` each history is the package's bundled H200 trace (tp-mlp-infer, rank
0) as N runs with their own ids, so every run carries the same events as a real one. With
``--history DIR`` the newest N runs of a saved history (``--fill`` first runs the demo's
configs on a 2-rank CPU lab until DIR holds N: a person's history after a few demos, what
issue 44 exported in 67 s). The export writes one offline HTML file with every run's
timeline, as `nbtools export` and the panel's Export do. Prints the median seconds over the
repeats, seconds per run and the file's size, one line per N, all measured in one process,
side by side; ``--profile`` prints where one export's time went.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from nbtools import StepConfig, export_html, load_traces

TRACE = Path(__file__).resolve().parents[1] / "nbtools" / "data" / "h200" / "tp_off_rank0.json.gz"


def bundled(n: int) -> list:
    base = dataclasses.replace(load_traces(TRACE), config=StepConfig(), source="lab")
    return [dataclasses.replace(base, run_id=f"{i:08x}") for i in range(n)]


def fill(folder: Path, n: int) -> None:
    """The demo's configs, in turn, on a 2-rank CPU lab until ``folder`` holds ``n`` runs."""
    from nbtools import History, Lab
    from nbtools.cli.demo import demo_configs
    have = len(History.load(folder)) if folder.is_dir() else 0
    if have >= n:
        return
    with Lab(n=2, history=folder, echo=False) as lab:
        lab.progress = False
        cfgs = demo_configs(lab.device_type)
        for i in range(n - have):
            lab.run(cfgs[i % len(cfgs)])


def saved(folder: Path, n: int) -> list:
    from nbtools import History
    runs = list(History.load(folder))
    if len(runs) < n:
        raise SystemExit(f"{folder} holds {len(runs)} runs, fewer than {n}: add --fill")
    return runs[-n:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="5,22,50")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--history", type=Path, default=None,
                    help="export the newest N runs of this saved history")
    ap.add_argument("--fill", action="store_true",
                    help="run the demo's configs into --history until it holds N runs")
    ap.add_argument("--profile", action="store_true", help="cProfile one export of each N")
    args = ap.parse_args()
    sizes = [int(x) for x in args.runs.split(",")]
    if args.history is not None and args.fill:
        fill(args.history, max(sizes))
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            runs = saved(args.history, n) if args.history is not None else bundled(n)
            events = sum(len(r.events) for r in runs)
            times, cpu = [], []
            for k in range(args.repeats):
                out = Path(tmp) / f"r{n}-{k}.html"
                t, c = time.perf_counter(), time.process_time()
                export_html(out, runs)
                times.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
            s = statistics.median(times)
            # CPU seconds beside wall seconds: on a shared box the wall time is mostly the
            # other processes' (the export is one thread)
            print(f"runs={n:4d}  events={events:8,d}  {s:8.1f} s  {s / n:6.2f} s/run  "
                  f"cpu {statistics.median(cpu):6.1f} s  {out.stat().st_size / 1e6:7.2f} MB  "
                  f"(each: {', '.join(f'{x:.1f}' for x in times)} s)", flush=True)
            if args.profile:
                import cProfile
                import pstats
                prof = cProfile.Profile()
                prof.runcall(export_html, Path(tmp) / "profiled.html", runs)
                pstats.Stats(prof).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
