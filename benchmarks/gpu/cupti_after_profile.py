"""Does a profiler session leave host cost in the process after it ends? (issue 23, line 4)

Findings §8 saw the lab's un-profiled steps read 0.94-0.99x a plain script in an engine that
never profiled and 1.24-1.40x after profiled runs in the same engine. Kineto keeps CUPTI
subscribed after a session unless it tears CUPTI down (TEARDOWN_CUPTI; torch sets it to 0
when it thinks CUDA graphs are in use), so every later kernel launch would pay a callback.

Each variant runs in a fresh process (CUPTI state is per process): a host-bound step (many
small layers, forward + backward + SGD) timed in rounds, then the variant's action, then
timed again. Prints per variant: median ms before, after, after/before.

    python benchmarks/gpu/cupti_after_profile.py [--steps 60] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

VARIANTS = {
    # name: (action, extra environment)
    "nothing": ("none", {}),
    "profiled": ("profile", {}),
    "profiled+teardown": ("profile", {"TEARDOWN_CUPTI": "1"}),
    "init_for_cuda_graphs": ("init_graphs", {}),
    "init_for_cuda_graphs+teardown": ("init_graphs", {"TEARDOWN_CUPTI": "1"}),
}


def _child(action: str, steps: int, rounds: int) -> dict:
    import torch
    dev = torch.device("cuda")
    torch.manual_seed(0)
    layers = torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(96)]).to(dev)
    opt = torch.optim.SGD(layers.parameters(), lr=1e-3)
    x = torch.randn(32, 128, device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        layers(x).square().mean().backward()
        opt.step()

    def timed():
        meds = []
        for _ in range(rounds):
            ts = []
            for _ in range(steps):
                torch.cuda.synchronize()
                t = time.perf_counter()
                step()
                torch.cuda.synchronize()
                ts.append((time.perf_counter() - t) * 1e3)
            meds.append(statistics.median(ts))
        return meds

    for _ in range(10):
        step()
    before = timed()
    if action == "profile":
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            for _ in range(3):
                step()
            torch.cuda.synchronize()
        p.events()
    elif action == "init_graphs":
        from torch.profiler._utils import _init_for_cuda_graphs
        _init_for_cuda_graphs()
    after = timed()
    return dict(before=before, after=after, teardown=os.environ.get("TEARDOWN_CUPTI"),
                torch=torch.__version__, cuda=torch.version.cuda)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(_child(a.child, a.steps, a.rounds)))
        return
    print(f"{'variant':32} {'before ms':>10} {'after ms':>9} {'after/before':>12}  rounds (before | after)")
    for name, (action, env) in VARIANTS.items():
        out = subprocess.run([sys.executable, __file__, "--child", action, "--steps",
                              str(a.steps), "--rounds", str(a.rounds)],
                             env={**os.environ, **env}, capture_output=True, text=True,
                             timeout=300)
        if out.returncode:
            print(f"{name:32} failed: {out.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        b, f = statistics.median(r["before"]), statistics.median(r["after"])
        print(f"{name:32} {b:10.3f} {f:9.3f} {f / b:12.3f}  "
              f"{' '.join(f'{v:.2f}' for v in r['before'])} | "
              f"{' '.join(f'{v:.2f}' for v in r['after'])}   (torch {r['torch']}, cuda {r['cuda']})")


if __name__ == "__main__":
    main()
