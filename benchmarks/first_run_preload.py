"""Issue 34.8: does the engines' early import of a Workload's modules (lab/preload.py) take
the import out of the first run? A person's order: Lab(), then the Workload's cell, a pause
while they type the next cell (--pause), then lab.run. Timed with the preload on and off
(Lab(preload=False)), alternating (on off off on ...), each trial a fresh Lab on fresh
bytecode.

    python benchmarks/first_run_preload.py [--trials 4] [--pause 10] [--ranks 2]

Honest about Python's bytecode: a warm host has transformers' ``.pyc`` files, a fresh GPU
host did not (docs/benchmarks.md, issue 34.8: 9.6 s of compiling). Each trial's engines get
a fresh ``PYTHONPYCACHEPREFIX`` (the engines inherit it; nbtools/lab/bytecode.py leaves a
person's own prefix alone), copied from a base that a first lab filled with what every lab
imports (torch, ipyparallel, the run's modules): only the Workload's own imports
(transformers and what it pulls in) compile in each trial, as on the fresh host.
--warm-bytecode skips that (every trial on this host's bytecode).

Prints per trial: Lab() seconds, the first run's wall seconds, its "start" phase (the lab's
progress clock, slowest rank), how long its ranks waited for the background import, and
the import's own seconds, and the host's load average (1 min) when the run began; then
medians per side.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nbtools import Lab, StepConfig  # noqa: E402
from nbtools.models import llama  # noqa: E402

CFG = StepConfig(scenario="custom", warmup=1, steps=2, profiled=1)


def _start_s(texts) -> float:
    """The "start" phase of the last run, from the lab's own progress line."""
    m = re.search(r"start ([\d.]+) (ms|s)\b", texts[-1] if texts else "")
    return float("nan") if m is None else float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


def trial(preload: bool, pause: float, ranks: int) -> dict:
    t0 = time.perf_counter()
    with Lab(n=ranks, history=None, echo=False, preload=preload) as lab:
        lab_s = time.perf_counter() - t0
        texts: list = []
        lab.progress = texts.append
        wl = llama(batch=1, seq=16)      # the person's next cell, after Lab()
        time.sleep(pause)                # ... and the one after it, typed
        t, load = time.perf_counter(), os.getloadavg()[0]
        run = lab.run(wl, CFG)
        run_s = time.perf_counter() - t
        waited = max(r["preload"]["waited_s"] for r in run.ranks.values())
        imported = [x for r in run.ranks.values() for x in r["preload"]["imported"]]
        import_s = max((x["seconds"] for x in imported), default=0.0)
        failed = sorted({x["name"] for x in imported if not x["ok"]})
    return dict(preload=preload, load=load, lab_s=lab_s, run_s=run_s, start_s=_start_s(texts),
                waited_s=waited, import_s=import_s, failed=failed)


def use_prefix(folder: Path) -> None:
    """The engines this process starts from now on read and write bytecode there (and do
    write it: an image may set PYTHONDONTWRITEBYTECODE, as this one and the H200's do)."""
    os.environ["PYTHONPYCACHEPREFIX"] = str(folder)
    os.environ["PYTHONDONTWRITEBYTECODE"] = ""


def base_prefix(folder: Path, ranks: int) -> None:
    """Fill folder with the bytecode of everything a lab and a small built-in run import."""
    use_prefix(folder)
    with Lab(n=ranks, history=None, echo=False, preload=False) as lab:
        lab.progress = False
        lab.run(StepConfig(warmup=1, steps=1, profiled=1))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=4, help="trials per side")
    ap.add_argument("--pause", type=float, default=10.0,
                    help="seconds between making the Workload and lab.run (typing)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--warm-bytecode", action="store_true",
                    help="keep this host's bytecode (no fresh PYTHONPYCACHEPREFIX per trial)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="nbtools-preload-bench-"))
    try:
        if not a.warm_bytecode:
            t = time.perf_counter()
            base_prefix(tmp / "base", a.ranks)
            print(f"base bytecode (a lab and a built-in run): {time.perf_counter() - t:.0f} s",
                  flush=True)
        rows = []
        order = [(i // 2 + i) % 2 == 0 for i in range(2 * a.trials)]     # on off off on ...
        for i, on in enumerate(order):
            if not a.warm_bytecode:
                fresh = tmp / f"trial{i}"
                shutil.copytree(tmp / "base", fresh, symlinks=True)
                use_prefix(fresh)
            r = trial(on, a.pause, a.ranks)
            rows.append(r)
            print(f"trial {i + 1} preload={'on ' if on else 'off'}: Lab() {r['lab_s']:.1f} s, "
                  f"first run {r['run_s']:.1f} s (start {r['start_s']:.1f} s; waited for the "
                  f"background import {r['waited_s']:.1f} s, which took {r['import_s']:.1f} s; "
                  f"load {r['load']:.1f})"
                  + (f" failed: {r['failed']}" if r["failed"] else ""), flush=True)
            if not a.warm_bytecode:
                shutil.rmtree(tmp / f"trial{i}", ignore_errors=True)
        for on in (True, False):
            side = [r for r in rows if r["preload"] == on]
            med = {k: statistics.median(r[k] for r in side) for k in ("lab_s", "run_s", "start_s")}
            print(f"median preload={'on ' if on else 'off'} (n={len(side)}): Lab() "
                  f"{med['lab_s']:.1f} s, first run {med['run_s']:.1f} s, start {med['start_s']:.1f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
