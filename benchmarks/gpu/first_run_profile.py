"""Where does a fresh engine's first run spend its "start" (issue 26: ~3.9 s on 1 x H200
for a run that takes 0.3 s on a warm engine)? cProfile around the engine's run, on every
rank, for the first run after Lab() and for the next one; prints the top of each profile.

    python benchmarks/gpu/first_run_profile.py [--top 35]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from faults import SMALL  # noqa: E402

from nbtools import Lab  # noqa: E402


def _install():     # on the engine
    import cProfile
    import io
    import pstats
    from nbtools.engine import runner
    if getattr(runner, "_profiled_orig", None) is None:
        runner._profiled_orig = runner._run
    orig = runner._profiled_orig
    runner._profiles = []

    def wrapped(*a, **k):
        pr = cProfile.Profile()
        pr.enable()
        try:
            return orig(*a, **k)
        finally:
            pr.disable()
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(TOP)
            runner._profiles.append(s.getvalue())
    runner._run = wrapped


def _take():        # on the engine
    from nbtools.engine import runner
    return list(runner._profiles)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=35)
    a = ap.parse_args()
    global TOP
    TOP = a.top
    with Lab(echo=False, history=None) as lab:
        eids = list(lab.rank_to_engine.values())
        lab.client[eids].push(dict(TOP=a.top), block=True)
        lab.client[eids].apply_sync(_install)
        for _ in range(2):
            lab.run(SMALL)
        for eid, profs in zip(eids, lab.client[eids].apply_sync(_take)):
            for i, p in enumerate(profs):
                print(f"\n===== engine {eid}, run {i + 1} =====\n{p}")


TOP = 35
if __name__ == "__main__":
    main()
