"""Small runs back to back on 2 CPU ranks: what a run costs beyond its steps (the lab's
own work on the engines and the client), for the same config again (state reused), two
configs taking turns (the A B B A of an A/B), and a 3-round A/A.

    python benchmarks/small_runs.py [--runs 20]

Run it from two checkouts side by side (PYTHONPATH=the other checkout) to compare them;
docs/benchmarks.md, "Small runs", has the numbers."""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from nbtools import Lab, StepConfig


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    n = ap.parse_args().runs
    a = StepConfig(scenario="tp-mlp-infer", warmup=1, steps=4, profiled=0)
    b = a.replace(compile="default", backend="eager")
    with Lab(n=2, history=tempfile.mkdtemp(), echo=False) as lab:
        lab.progress = False
        lab.run(a), lab.run(b), lab.run(a)
        same = [timed(lambda: lab.run(a)) for _ in range(n)]
        turns = [timed(lambda: lab.run(a if i % 2 else b)) for i in range(n)]
        aa = timed(lambda: lab.ab(a, a, rounds=3, on_run=lambda e: None))
    print(f"same config again: median {statistics.median(same):.3f} s a run "
          f"(min {min(same):.3f}, max {max(same):.3f}, {n} runs)")
    print(f"two configs taking turns: median {statistics.median(turns):.3f} s a run "
          f"(min {min(turns):.3f}, max {max(turns):.3f}, {n} runs)")
    print(f"lab.ab(a, a, rounds=3) (12 runs): {aa:.2f} s")


if __name__ == "__main__":
    main()
