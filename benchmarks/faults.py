"""Faults: how long until a clear error, how long until the next run is ready, what was kept;
healing (warm spares, the group re-created in place) side by side with restarting every
engine (lab.restart()). Also Lab() start-up and close() times.

    python benchmarks/faults.py                      # CPU: 2 ranks on gloo
    python benchmarks/faults.py --close-ranks 2 16   # + close() at 16 CPU ranks
    python benchmarks/faults.py --out $OUT/faults.json   # GPU host: one rank per GPU

"time to error" runs from lab.run() to the exception (for a hang: beyond the run's timeout;
for Ctrl-C: from SIGINT); the fault is the step's first act. "ready" is the time from the
error until the next small run has returned, minus that small run's own median time before
any fault: the cost of getting back. Medians over --repeats.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

from nbtools import Lab, StepConfig
from nbtools.results.errors import RunFailed

# the heals measured here swap in warm spares: where the host has no room for them beside
# the ranks (2 cores), the lab starts them only with its first heal; start them right after
# Lab() as on a larger host (NBTOOLS_SPARES_WITH_RANKS=1 would start them with the ranks)
os.environ.setdefault("NBTOOLS_SPARES_WITH_RANKS", "0")

SMALL = StepConfig(warmup=0, steps=1, profiled=0)
CUSTOM = StepConfig(scenario="custom", warmup=0, steps=1, profiled=0)
HANG_TIMEOUT = 3.0


def _exception(ctx):
    if ctx.rank == 1:
        raise ValueError("planted")


def _hang(ctx):
    import time
    if ctx.rank == 1:
        time.sleep(3600)


def _exit(ctx):
    import os
    if ctx.rank == 1:
        os._exit(3)


def _sigkill(ctx):
    import os
    import signal
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)


def _segfault(ctx):
    import ctypes
    if ctx.rank == 1:
        ctypes.string_at(0)


def _oom(ctx):
    import torch
    if ctx.rank == 1:
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")   # 1 PiB


def _sleep(ctx):
    import time
    for _ in range(600):
        time.sleep(0.1)


FAULTS = {"exception": _exception, "hang past timeout": _hang, "os._exit(3)": _exit,
          "SIGKILL": _sigkill, "segfault": _segfault, "CUDA OOM": _oom, "Ctrl-C": _sleep}


def inject(lab, name) -> tuple[float, str]:
    """Run the fault; (seconds to the error, the error's first line)."""
    fn = FAULTS[name]
    t0 = time.perf_counter()
    if name == "Ctrl-C":
        timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        try:
            lab.run(fn, CUSTOM)
        except KeyboardInterrupt:
            return time.perf_counter() - t0 - 1.0, "KeyboardInterrupt"
        finally:
            timer.join()
        raise AssertionError("Ctrl-C did not interrupt the run")
    try:
        lab.run(fn, CUSTOM, timeout=HANG_TIMEOUT if name.startswith("hang") else None)
    except RunFailed as e:
        dt = time.perf_counter() - t0 - (HANG_TIMEOUT if name.startswith("hang") else 0)
        return dt, str(e).splitlines()[0][:110]
    raise AssertionError(f"{name}: the run did not fail")


def small_run_s(lab) -> float:
    t = time.perf_counter()
    assert lab.run(SMALL).ok
    return time.perf_counter() - t


def kept(lab, n_before) -> str:
    """The faulted run's status in the history (the small run after it is not counted)."""
    runs = lab.history.runs[n_before:n_before + 1]
    return runs[0].status if runs else "nothing"


def measure(lab, name, repeats, base_s, restart: bool) -> dict:
    errs, readies, what, msg = [], [], "", ""
    for _ in range(repeats):
        if lab.pool is not None:
            lab.pool.warm_spares(lab.client, 300)    # faults come apart, not back to back
        n = len(lab.history)
        err_s, msg = inject(lab, name)
        t = time.perf_counter()
        if restart:
            lab.restart()
        small_run_s(lab)
        readies.append(time.perf_counter() - t - base_s)
        errs.append(err_s)
        what = kept(lab, n)
    return dict(fault=name, error_s=statistics.median(errs), ready_s=statistics.median(readies),
                kept=what, message=msg, repeats=repeats, mode="restart" if restart else "heal")


def close_time(n: int, cpu: bool) -> float:
    """close() at n ranks, in a fresh process (CPU ranks when cpu: no GPU visible)."""
    code = ("import time; from nbtools import Lab; lab = Lab(n=%d, history=None, spares=False); "
            "t = time.perf_counter(); lab.close(); print(time.perf_counter() - t)") % n
    env = dict(os.environ, **({"CUDA_VISIBLE_DEVICES": ""} if cpu else {}))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=900)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline-repeats", type=int, default=1)
    ap.add_argument("--starts", type=int, default=3, help="Lab() start-ups to time")
    ap.add_argument("--faults", nargs="*", default=None)
    ap.add_argument("--close-ranks", type=int, nargs="*", default=[2],
                    help="time close() at these rank counts (more ranks than GPUs: CPU ranks)")
    ap.add_argument("--out", default=None, help="also write the results as JSON here")
    args = ap.parse_args()

    starts = []
    for _ in range(args.starts - 1):
        lab = Lab(history=None)
        starts.append(lab.startup_s)
        lab.close()
    lab = Lab(history=None, timeout=300)
    starts.append(lab.startup_s)
    print(f"Lab() start-up: median {statistics.median(starts):.1f} s over {len(starts)} "
          f"({lab.world_size} ranks on {lab.device_type}; "
          f"{', '.join(f'{s:.1f}' for s in starts)})", flush=True)
    faults = args.faults or [f for f in FAULTS if f != "CUDA OOM" or lab.device_type == "cuda"]
    base = statistics.median(small_run_s(lab) for _ in range(3))
    print(f"small run (no fault): median {base:.2f} s", flush=True)
    rows = []
    for name in faults:
        for restart, reps in ((False, args.repeats), (True, args.baseline_repeats)):
            if reps <= 0:
                continue
            row = measure(lab, name, reps, base, restart)
            rows.append(row)
            print(f"  {name:18s} {row['mode']:8s} error {row['error_s']:5.2f} s  ready "
                  f"{row['ready_s']:5.2f} s  kept: {row['kept']}  | {row['message']}", flush=True)
    device = f"{lab.world_size} x {lab.infos[0]['device_name']}" if lab.device_type == "cuda" \
        else f"{lab.world_size} CPU ranks"
    lab.close()
    closes = {}
    for n in args.close_ranks:
        cpu = lab.device_type == "cpu" or n > lab.world_size
        closes[n] = close_time(n, cpu)
        print(f"close() at {n} {'CPU ' if cpu else ''}ranks: {closes[n]:.2f} s", flush=True)

    print(f"\n### Faults, {device} (medians; heal: {args.repeats}, restart: "
          f"{args.baseline_repeats} repeat(s))\n")
    print("| fault | time to a clear error | ready again: heal | ready again: restart "
          "everything | kept |")
    print("|---|---|---|---|---|")
    by = {(r["fault"], r["mode"]): r for r in rows}
    for name in faults:
        h, r = by.get((name, "heal")), by.get((name, "restart"))
        rs = f"{r['ready_s']:.2f} s" if r else "-"
        print(f"| {name} | {h['error_s']:.2f} s | {h['ready_s']:.2f} s | {rs} | "
              f"the run, as {h['kept']} |")
    print(f"\nLab() start-up {statistics.median(starts):.1f} s; "
          + "; ".join(f"close() at {n} ranks {s:.2f} s" for n, s in closes.items()))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(device=device, startup_s=starts, small_run_s=base, rows=rows,
                           close_s=closes), f, indent=1)


if __name__ == "__main__":
    main()
