"""Timeline(run) build time on 1M synthetic events: this checkout against another one, side
by side (alternating subprocesses), wall and CPU time.

    git worktree add /tmp/nbtools-main main     # or: git archive main | tar -x -C /tmp/nbtools-main
    python benchmarks/bench_timeline_build.py --other /tmp/nbtools-main [--rounds 3]

Each round builds in a fresh process per checkout: one warm-up build, then 3 timed. CPU time
(time.process_time) says more than wall time on a shared box: other jobs stretch the wall
clock, not the CPU seconds this process spends.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE = r'''
import sys, time, json
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests"]
from support.runs import synthetic_run
from nbtools.ui.timeline import Timeline
run = synthetic_run(n_ranks=8, events_per_rank=125_000, step_ns=100_000_000, seed=1)
Timeline(run, width=1100)
out = []
for _ in range(3):
    t, c = time.perf_counter(), time.process_time()
    Timeline(run, width=1100)
    out.append((time.perf_counter() - t, time.process_time() - c))
print(json.dumps(out))
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--other", required=True, type=Path, help="another checkout's root")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    sides = {"other": args.other.resolve(), "this": ROOT}
    res = {k: [] for k in sides}
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for _ in range(args.rounds):
        for name, root in sides.items():
            out = subprocess.run([sys.executable, "-c", CODE, str(root)], capture_output=True,
                                 text=True, check=True)
            res[name] += json.loads(out.stdout.strip().splitlines()[-1])
    print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    cpu = {}
    for name, v in res.items():
        cpu[name] = statistics.median(c for _, c in v)
        print(f"{name:5} ({sides[name]}): wall median {statistics.median(w for w, _ in v):.3f} s, "
              f"CPU median {cpu[name]:.3f} s over {len(v)} builds")
    print(f"CPU time other/this: {cpu['other'] / cpu['this']:.2f}")


if __name__ == "__main__":
    main()
