"""What an engine's start would cost forked from a warm template instead of a new interpreter
(the measurement behind the next step for issue 35 line 7, docs/benchmarks.md "Session 17").

An engine today is `python -m nbtools.engine.boot`: a new interpreter that imports
ipyparallel's engine, torch, torch.distributed, torch._dynamo and the engine side of a run.
Here a template process imports the same once, then forks two children that join a gloo
process group and run a matrix product and an all-reduce (so the fork is shown to work for
what a rank does); against that, two new interpreters doing the imports and the same work.
CPU seconds are summed over the processes (user + system, from their rusage), so the
number holds on a loaded box; wall times are printed too.

    .venv/bin/python benchmarks/engine_fork.py [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

IMPORTS = ("import ipyparallel.engine.app, torch, torch.distributed, torch._dynamo, "
           "torch.profiler\n"
           "from nbtools.engine import apply, capture, compile_recorder, custom_step, runner, "
           "scenarios\n"
           "from nbtools.trace import load\n")


def work(rank: int, port: int) -> None:
    """What a rank does first: join a 2-rank gloo group, compute, all-reduce."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    x = torch.randn(256, 256) @ torch.randn(256, 256)
    dist.all_reduce(x)
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawned() -> tuple[float, float]:
    """Two new interpreters, each importing and working: (CPU s of both, wall s)."""
    port, t0 = free_port(), time.perf_counter()
    code = IMPORTS + f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r})\n" \
        "import engine_fork; engine_fork.work(int(sys.argv[1]), int(sys.argv[2]))\n"
    procs = [subprocess.Popen([sys.executable, "-c", code, str(r), str(port)]) for r in (0, 1)]
    cpu = 0.0
    for p in procs:
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        assert p.returncode == 0, p.returncode
        cpu += ru.ru_utime + ru.ru_stime
    return cpu, time.perf_counter() - t0


def forked() -> tuple[float, float, float]:
    """A template that imports once, then forks the two: (CPU s of all three, wall s, CPU s
    of the two children)."""
    port, t0 = free_port(), time.perf_counter()
    code = IMPORTS + f"import os, sys; sys.path.insert(0, {os.path.dirname(__file__)!r})\n" \
        "import engine_fork\n" \
        "pids = []\n" \
        "for r in (0, 1):\n" \
        "    pid = os.fork()\n" \
        "    if pid == 0:\n" \
        "        code = 0\n" \
        "        try:\n" \
        "            engine_fork.work(r, int(sys.argv[1]))\n" \
        "        except BaseException:\n" \
        "            import traceback; traceback.print_exc(); code = 1\n" \
        "        os._exit(code)\n" \
        "    pids.append(pid)\n" \
        "cpu = 0.0\n" \
        "for pid in pids:\n" \
        "    _, status, ru = os.wait4(pid, 0)\n" \
        "    assert os.waitstatus_to_exitcode(status) == 0\n" \
        "    cpu += ru.ru_utime + ru.ru_stime\n" \
        "print(cpu)\n"
    p = subprocess.Popen([sys.executable, "-c", code, str(port)], stdout=subprocess.PIPE,
                         text=True)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # wait4's rusage of the template includes the children it waited for (Linux reports
    # RUSAGE_BOTH for a reaped child); ``out`` is the children's part of it
    return ru.ru_utime + ru.ru_stime, time.perf_counter() - t0, float(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    n = ap.parse_args().repeats
    rows = {"spawned": [], "forked": [], "of which children": []}
    for _ in range(n):               # interleaved, so both see the same load
        rows["spawned"].append(spawned())
        cpu, wall, kids = forked()
        rows["forked"].append((cpu, wall))
        rows["of which children"].append((kids, wall))
    print(f"two ranks' start (imports, gloo join, a product, an all-reduce), {n} repeats, "
          f"torch {__import__('torch').__version__}, {os.cpu_count()} cores")
    for k, v in rows.items():
        cpu = [c for c, _ in v]
        wall = [w for _, w in v]
        print(f"{k:18s} CPU s median {statistics.median(cpu):.2f} (all: "
              f"{', '.join(f'{c:.2f}' for c in cpu)}), wall s median {statistics.median(wall):.2f}")


if __name__ == "__main__":
    main()
