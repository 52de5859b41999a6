"""The first run after Lab() on this host, with the spares as the lab starts them here and
with them started right after Lab() (NBTOOLS_SPARES_WITH_RANKS=0), alternating A B B A.
On 2 cores the lab now leaves them to the first heal (lab/pool.py, start_with).

    python benchmarks/first_run_spares.py [--pairs 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

ONE = """
import tempfile, time
from nbtools import Lab, StepConfig
t = time.perf_counter()
lab = Lab(n=2, history=tempfile.mkdtemp(), echo=False)
lab.progress = False
started = time.perf_counter() - t
t = time.perf_counter()
assert lab.run(StepConfig(scenario="tp-mlp-infer", warmup=1, steps=4, profiled=0)).ok
first = time.perf_counter() - t
t = time.perf_counter()
for _ in range(5):
    lab.run(StepConfig(scenario="tp-mlp-infer", warmup=1, steps=4, profiled=0))
print(started, first, (time.perf_counter() - t) / 5, len(lab.pool.spares))
lab.close()
"""


def one(env_value):
    env = dict(os.environ)
    env.pop("NBTOOLS_SPARES_WITH_RANKS", None)
    if env_value is not None:
        env["NBTOOLS_SPARES_WITH_RANKS"] = env_value
    out = subprocess.run([sys.executable, "-c", ONE], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    return [float(x) for x in out[:3]] + [int(out[3])]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=2)
    pairs = ap.parse_args().pairs
    sides = {"as the lab starts them": None, "right after Lab() (=0)": "0"}
    got = {k: [] for k in sides}
    for i in range(pairs):
        for name in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
            got[name].append(one(sides[name]))
    for name, rows in got.items():
        med = [statistics.median(r[j] for r in rows) for j in range(3)]
        print(f"spares {name}: Lab() {med[0]:.2f} s, first run {med[1]:.2f} s "
              f"({', '.join(f'{r[1]:.2f}' for r in rows)}), next 5 runs {med[2]:.3f} s each, "
              f"spares after 6 runs: {rows[0][3]} (medians of {len(rows)})")


if __name__ == "__main__":
    main()
