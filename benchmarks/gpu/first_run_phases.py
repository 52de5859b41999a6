"""Issue 34.8: where does the first run after Lab() spend its time on a fresh GPU host, for a
person's transformers Workload (seen: 23 s in "start" on 1 x H200)? Times Lab(), then each
of the first runs by phase (the lab's own progress clock: start, warm-up, measured,
profiled, parse, as the slowest rank saw them), and cProfile's top of the engine's first run.

    python3 benchmarks/gpu/first_run_phases.py OUT_DIR [--runs 2] [--top 25] [--workload small]
        [--no-preload] [--pause 10]

--workload small runs benchmarks/faults.py's small built-in config instead (what
first_run_profile.py measured before: a fresh engine's own first run, issue 26).
The llama Workload is made after Lab() returns, as a person's next cell, then --pause
seconds pass (their typing) before the first run: with the preload (the default) the
engines import transformers meanwhile (lab/preload.py); --no-preload is Lab(preload=False).
The engines' early imports and their seconds are printed after the runs.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nbtools import Lab, StepConfig  # noqa: E402
from nbtools.models import llama  # noqa: E402


def _install():     # on the engine (defined here: the engines cannot import this folder)
    import cProfile
    import io
    import pstats
    from nbtools.engine import runner
    orig = runner._run
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--workload", choices=("llama", "small"), default="llama")
    ap.add_argument("--preload", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--pause", type=float, default=0.0,
                    help="seconds between making the Workload and the first run")
    a = ap.parse_args()
    log = open(f"{a.out}/first_run_phases.txt", "w")

    def say(text):
        print(text, flush=True)
        log.write(text + "\n")

    if a.workload == "small":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from faults import SMALL
        wl, cfg = None, SMALL
    else:
        wl, cfg = True, StepConfig(scenario="custom", warmup=2, steps=5, profiled=1)
    t0 = time.perf_counter()
    with Lab(echo=False, history=None, preload=a.preload) as lab:
        say(f"Lab() {time.perf_counter() - t0:.1f} s: {lab!r}, preload {a.preload}")
        eids = list(lab.rank_to_engine.values())
        lab.client[eids].push(dict(TOP=a.top), block=True)
        lab.client[eids].apply_sync(_install)
        if wl is not None:
            wl = llama(batch=2, seq=128)     # the person's next cell
            time.sleep(a.pause)              # ... and their typing
        texts: list = []
        lab.progress = texts.append      # the lab's own progress lines; the last says where
        for i in range(a.runs):
            t = time.perf_counter()
            run = lab.run(wl, cfg) if wl is not None else lab.run(cfg)
            say(f"run {i + 1}: {run.status} in {time.perf_counter() - t:.1f} s; "
                f"{texts[-1] if texts else 'no progress line'}")
        for r, recs in lab.preloads().items():
            for x in recs:
                say(f"rank {r} preloaded {x['name']}: ok={x['ok']} in {x['seconds'] or 0:.1f} s"
                    + (f" ({x['error']})" if x["error"] else ""))
        for eid, profs in zip(eids, lab.client[eids].apply_sync(_take)):
            for i, p in enumerate(profs[:1]):
                say(f"\n===== engine {eid}, run {i + 1} (cProfile, cumulative) =====\n{p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
