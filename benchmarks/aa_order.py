"""Identical configs (only the seed differs, which rebuilds the model at every switch) run in
the old order (rounds of two runs, A B then B A) and in rounds of A B B A: each run's step
time with its position and whether the engine rebuilt or reused its state, and what each
design makes of them. Finds whatever in the order or the state of the runs favours one side.

    python benchmarks/aa_order.py [--rounds 9] [--scenario ddp-train] [--steps 8]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nbtools import Lab, StepConfig  # noqa: E402
from nbtools.analysis.metrics import combine  # noqa: E402
from nbtools.analysis.verdict import rounds_verdict  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--scenario", default="ddp-train")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--n", type=int, default=2)
    a = p.parse_args()
    base = dict(scenario=a.scenario, warmup=1, steps=a.steps, profiled=0)
    A, B = StepConfig(seed=0, **base), StepConfig(seed=1, **base)
    with Lab(n=a.n, history=None, echo=False) as lab:
        lab.progress = False
        print(f"{lab.world_size} ranks on {lab.device_type}; {a.scenario}, {a.steps} steps a run")
        for design in ("pairs", "abba"):
            if design == "pairs":
                order = [s for k in range(a.rounds) for s in (("A", "B") if k % 2 == 0
                                                               else ("B", "A"))]
            else:
                order = [s for _ in range((a.rounds + 1) // 2) for s in ("A", "B", "B", "A")]
            times, reused = [], []
            for i, side in enumerate(order):
                run = lab.run(A if side == "A" else B)
                times.append(combine(run.summary, "step_ms", run.config))
                reused.append(bool(run.ranks[0].get("reused")))
                print(f"{design:5s} {i:2d} {side} {'reuse  ' if reused[-1] else 'rebuild'} "
                      f"{times[-1]:8.3f} ms", flush=True)
            t, s, r = np.array(times), np.array(order), np.array(reused)
            print(f"  median step_ms: rebuilt runs {np.median(t[~r]):.3f}, reused "
                  f"{np.median(t[r]):.3f} ms ({r.sum()} reused of {len(r)})")
            print(f"  A median {np.median(t[s == 'A']):.3f}, B median {np.median(t[s == 'B']):.3f}")
            if design == "pairs":
                pa = t.reshape(-1, 2)
                sa = s.reshape(-1, 2)
                ra = np.where(sa[:, 0] == "A", pa[:, 0], pa[:, 1])
                rb = np.where(sa[:, 0] == "B", pa[:, 0], pa[:, 1])
                per = rb / ra
                print("  per-round B/A:", " ".join(f"{x:.3f}" for x in per),
                      f"median {np.median(per):.3f}")
            else:
                ra, rb = t[s == "A"].reshape(-1, 2), t[s == "B"].reshape(-1, 2)
                print("  " + rounds_verdict(ra, rb).text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
