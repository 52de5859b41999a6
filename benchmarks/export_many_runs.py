"""How long `export_html` takes as the history grows (a long-lived lab's history).

    python benchmarks/export_many_runs.py [--runs 5,20,50] [--repeats 1]

Each history is the package's bundled H200 trace (tp-mlp-infer, rank 0) as N runs with their
own ids, so every run carries the same events as a real one; the export writes one offline
HTML file with every run's timeline, as `nbtools export` and `lab.panel`'s Export do. Prints
seconds (median of the repeats), seconds per run and the file's size, one line per N, all
measured in one process, side by side.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="5,20,50")
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    base = dataclasses.replace(load_traces(TRACE), config=StepConfig(), source="lab")
    print(f"{len(base.events)} events a run")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.runs.split(",")):
            runs = [dataclasses.replace(base, run_id=f"{i:08x}") for i in range(n)]
            times = []
            for k in range(args.repeats):
                out = Path(tmp) / f"r{n}-{k}.html"
                t = time.perf_counter()
                export_html(out, runs)
                times.append(time.perf_counter() - t)
            s = statistics.median(times)
            print(f"runs={n:4d}  {s:8.1f} s  {s / n:6.2f} s/run  {out.stat().st_size / 1e6:7.1f} MB")


if __name__ == "__main__":
    main()
