"""Issue 32.3: Run All of each tutorial on this machine's CPU ranks, as a person would
(``python -m nbtools export``, the notebook's own defaults: a CPU lab picks the small sizes),
each in a fresh empty folder with its own history, timed by wall clock; the load average
beside each so a loaded box shows.

    python benchmarks/tutorials_cpu.py [--repeats 3] [--only 00,03] [--deadline 900]

Rounds go notebook by notebook (00 01 ... 07, then again), so a slow spell of the box falls
on several notebooks rather than on all repeats of one. Prints one line per run and the
medians; exit status 1 when any run failed or hit the deadline.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated prefixes: 00,03")
    ap.add_argument("--deadline", type=float, default=900.0)
    a = ap.parse_args()
    books = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb"))
    if a.only:
        books = [b for b in books if b.name[:2] in a.only.split(",")]
    times: dict = {b.name: [] for b in books}
    bad = 0
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    for k in range(a.repeats):
        for b in books:
            with tempfile.TemporaryDirectory(prefix="nbtools-tutorial-") as d:
                load0 = os.getloadavg()[0]
                t = time.perf_counter()
                r = subprocess.run([sys.executable, "-m", "nbtools", "export", str(b), "-o",
                                    str(Path(d) / "out.html"), "-p",
                                    f"HISTORY={str(Path(d) / 'runs')!r}", "--deadline",
                                    str(a.deadline)], cwd=d, env=env, capture_output=True,
                                   text=True)
                wall = time.perf_counter() - t
                ok = r.returncode == 0
                bad += not ok
                times[b.name].append(wall if ok else float("inf"))
                tail = "" if ok else " | " + (r.stderr.strip().splitlines() or ["?"])[-1][:200]
                print(f"repeat {k + 1} {b.name}: {wall:6.1f} s rc {r.returncode} "
                      f"load {load0:.1f} -> {os.getloadavg()[0]:.1f}{tail}", flush=True)
    print("\nmedians:")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name}: {'failed' if med == float('inf') else f'{med:.1f} s'} "
              f"(n={len(ts)}: {', '.join('failed' if t == float('inf') else f'{t:.0f}' for t in ts)})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
