"""Lab() start-up, phase by phase, and the first fault right after it (issue 26).

    python benchmarks/startup.py                   # CPU: 2 ranks on gloo, 3 starts
    python benchmarks/startup.py --starts 3 --out $OUT/startup.json   # GPU host (startup.sh)

Each start is a fresh Lab() in this process; the phases are timed from the client by
wrapping the calls Lab() makes (nothing in the package is changed for it):

- controller: ipyparallel's controller process spawned (start_controller_sync)
- launch: the engine processes spawned (Pool.launch, one call per engine; before issue 26's
  engine/boot.py the first one also waited for the controller to write its connection file)
- connect: the client connected to the controller (since then: waiting for the controller's
  own start, while the engines start too)
- register: until every engine has registered with the controller (their Python, ipykernel
  and ipyparallel imports, the controller's reply and its first heartbeat; torch's import
  runs in the background meanwhile, liveness._warm)
- join (all): Lab._join, of which identity / pin / info / setup are its calls on every
  engine (setup: torch.distributed's process group, which waits for the engines' torch
  import); the rest of it is rank 0 opening the store's port
- spares: starting the warm spares (Pool.fill_spares; returns at once unless it waits)
- other: the rest of Lab()'s wall time

On the engines (liveness.warm_times; the slowest rank): when the background import began
(liveness.start(), first thing in the process) and when torch, torch.distributed and the
rest (torch._dynamo, the run's modules: what the first run waits for) were imported, in
seconds after Lab() was called; and how long after Lab() returned they were all warm.

Then, with no pause, the first fault: the last rank of a custom step raises. "ready" is from the
error until the next small run has returned, minus that small run's median time (measured
after, on the healed lab). Then a second fault at once (back to back: the spares started
by the first heal). Medians over --starts.
"""
from __future__ import annotations

import argparse
import collections
import functools
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from faults import CUSTOM, SMALL  # noqa: E402  (the fault benchmark's configs)

import ipyparallel as ipp  # noqa: E402

from nbtools import Lab  # noqa: E402
from nbtools.engine import liveness  # noqa: E402
from nbtools.lab import pool as pool_mod  # noqa: E402
from nbtools.lab import lab as lab_mod  # noqa: E402
from nbtools.results.errors import RunFailed  # noqa: E402

PHASES = collections.defaultdict(float)


def _timed(owner, name, phase):
    fn = getattr(owner, name)

    def wrapper(*a, **kw):
        t = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            key = phase(a) if callable(phase) else phase
            PHASES[key] += time.perf_counter() - t
    setattr(owner, name, wrapper)


def _timed_async(owner, name, phase):
    """The same for ipyparallel's coroutine methods (their *_sync forms call these)."""
    fn = getattr(owner, name)

    @functools.wraps(fn)
    async def wrapper(*a, **kw):
        t = time.perf_counter()
        try:
            return await fn(*a, **kw)
        finally:
            PHASES[phase] += time.perf_counter() - t
    setattr(owner, name, wrapper)


def instrument() -> None:
    _timed_async(ipp.Cluster, "start_controller", "controller")
    _timed_async(ipp.Cluster, "connect_client", "connect")
    _timed(pool_mod.Pool, "launch", "launch")
    _timed(pool_mod.Pool, "await_engine", "register")
    _timed(ipp.Client, "wait_for_engines", "register")
    _timed(pool_mod.Pool, "fill_spares", "spares")
    _timed(lab_mod.Lab, "_on", lambda a: a[2].__name__)        # self, ids, fn
    _orig_join = lab_mod.Lab._join

    def join(self, ids):
        t = time.perf_counter()
        try:
            return _orig_join(self, ids)
        finally:
            PHASES["join (all)"] += time.perf_counter() - t
    lab_mod.Lab._join = join


def _exception(ctx):
    """The last rank raises (rank 1 of 2; rank 0 on one GPU)."""
    if ctx.rank == ctx.world_size - 1:
        raise ValueError("planted")


def small_run_s(lab) -> float:
    t = time.perf_counter()
    assert lab.run(SMALL).ok
    return time.perf_counter() - t


def fault_ready(lab) -> tuple[float, float]:
    """(seconds to the error, seconds from the error until the next small run returned)."""
    lab.heal_s = float("nan")       # set by a heal (all ranks swapped for spares: CUDA)
    t0 = time.perf_counter()
    try:
        lab.run(_exception, CUSTOM)
        raise AssertionError("the planted exception did not fail the run")
    except RunFailed:
        pass
    t1 = time.perf_counter()
    small_run_s(lab)
    return t1 - t0, time.perf_counter() - t1


def engine_times(lab, t_wall: float, wait: bool = False) -> tuple[dict, float]:
    """What the ranks' engines did, seconds after Lab() was called (the slowest rank's):
    liveness.start() ran (the interpreter and nbtools.engine.liveness loaded; the background
    import began), torch and
    torch.distributed were imported (what Lab()'s setup waits for), the rest of the warm
    import was done (torch._dynamo and the run's modules: the first run waits for it).
    And how long after Lab() returned the engines were warm (0 when they already were)."""
    eids = list(lab.rank_to_engine.values())
    if wait:
        t = time.perf_counter()
        lab._on(eids, liveness.wait_warm, args_for=lambda e: (300.0,))
        warm_s = time.perf_counter() - t
    times = lab._on(eids, liveness.warm_times)
    keys = ["started", "torch", "torch.distributed", "the rest (dynamo, run modules)"]
    got = {k: max((tm.get(k) or t_wall) - t_wall for tm in times) for k in keys
           if all(tm.get(k) for tm in times)}
    if not wait:    # not waited for: still importing is "after Lab() returned"
        warm_s = 0.0 if keys[-1] in got else float("nan")
    return got, warm_s


_START_WITH = pool_mod.Pool.start_with


def one_start(n, mode: str) -> dict:
    """mode "with": the lab as it is (spares start with the ranks where the host has room);
    "after": spares started only after the ranks joined (the lab before issue 26)."""
    pool_mod.Pool.start_with = _START_WITH if mode == "with" else (lambda self, k: None)
    PHASES.clear()
    t, t_wall = time.perf_counter(), time.time()
    lab = Lab(n=n, history=None, timeout=300)
    wall = time.perf_counter() - t
    phases = dict(PHASES)
    top = ("controller", "connect", "launch", "register", "join (all)", "spares")
    phases["other"] = wall - sum(phases.get(k, 0.0) for k in top)
    try:
        engine, warm_s = engine_times(lab, t_wall)     # read, not waited for
        err1, ready1 = fault_ready(lab)       # spares as Lab() left them
        heal1 = getattr(lab, "heal_s", float("nan"))
        err2, ready2 = fault_ready(lab)       # back to back: the first heal's new spares
        heal2 = getattr(lab, "heal_s", float("nan"))
        base = statistics.median(small_run_s(lab) for _ in range(3))
        device = (f"{lab.world_size} x {lab.infos[0]['device_name']}" if lab.device_type == "cuda"
                  else f"{lab.world_size} CPU ranks")
    finally:
        lab.close()
    return dict(mode=mode, device=device, lab_s=wall, phases=phases, small_run_s=base,
                engine=engine, warm_after_lab_s=warm_s,
                first_fault=dict(error_s=err1, ready_s=ready1 - base, heal_s=heal1),
                second_fault=dict(error_s=err2, ready_s=ready2 - base, heal_s=heal2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=3)
    ap.add_argument("--n", type=int, default=None, help="ranks (default: one per GPU, else 2)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--modes", nargs="+", default=["with", "after"], choices=["with", "after"],
                    help="spares started with the ranks (the lab) / after they joined (before "
                         "issue 26); several: interleaved, start by start")
    args = ap.parse_args()
    instrument()
    rows = []
    for i in range(args.starts):
        for mode in (args.modes if i % 2 == 0 else args.modes[::-1]):    # ABBA
            rows.append(report(i, one_start(args.n, mode)))
    for mode in args.modes:
        summarise([r for r in rows if r["mode"] == mode])
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


def report(i, r) -> dict:
    ph = ", ".join(f"{k} {v:.2f}" for k, v in r["phases"].items())
    print(f"start {i + 1} (spares {r['mode']}): Lab() {r['lab_s']:.2f} s ({ph}); first fault: "
          f"error {r['first_fault']['error_s']:.2f} s, ready {r['first_fault']['ready_s']:.2f} s "
          f"(heal {r['first_fault']['heal_s']:.2f} s); second, back to back: ready "
          f"{r['second_fault']['ready_s']:.2f} s (heal {r['second_fault']['heal_s']:.2f} s); "
          f"small run {r['small_run_s']:.2f} s; engine (s after Lab() was called): "
          + ", ".join(f"{k} {v:.2f}" for k, v in r["engine"].items())
          + ("; the rest still importing when Lab() returned" if r["warm_after_lab_s"]
             != r["warm_after_lab_s"] else "; warm when Lab() returned"), flush=True)
    return r


def summarise(rows) -> None:
    def med(get):
        return statistics.median(get(r) for r in rows)
    keys = list(dict.fromkeys(k for r in rows for k in r["phases"]))
    print(f"\n### Lab() start-up and the first fault, {rows[0]['device']}, spares "
          f"{rows[0]['mode']} the ranks (medians of {len(rows)})\n")
    print(f"Lab(): {med(lambda r: r['lab_s']):.2f} s ("
          + ", ".join(f"{r['lab_s']:.2f}" for r in rows) + ")")
    for k in keys:
        print(f"  {k:12s} {med(lambda r: r['phases'].get(k, 0.0)):6.2f} s")
    ekeys = list(dict.fromkeys(k for r in rows for k in r["engine"]))
    print("engines (the slowest rank), s after Lab() was called: " + ", ".join(
        f"{k} {med(lambda r: r['engine'].get(k, float('nan'))):.2f}" for k in ekeys))
    pending = sum(1 for r in rows if r["warm_after_lab_s"] != r["warm_after_lab_s"])
    print(f"the rest (torch._dynamo, the run's modules) still importing when Lab() returned: "
          f"{pending} of {len(rows)} starts (the first run waits for it)")
    print(f"Lab() and its first run (the fault) together: "
          f"{med(lambda r: r['lab_s'] + r['first_fault']['error_s']):.2f} s")
    print(f"first fault after Lab(): ready {med(lambda r: r['first_fault']['ready_s']):.2f} s "
          f"(heal {med(lambda r: r['first_fault']['heal_s']):.2f} s), error "
          f"{med(lambda r: r['first_fault']['error_s']):.2f} s")
    print(f"second fault, back to back: ready {med(lambda r: r['second_fault']['ready_s']):.2f} s "
          f"(heal {med(lambda r: r['second_fault']['heal_s']):.2f} s)")


if __name__ == "__main__":
    main()
