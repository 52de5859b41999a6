"""docs/findings.md §4's timing claims under 30 % (4, 9, 11) again, as A/B verdicts with
their 95 % intervals: ``lab.ab`` in interleaved rounds (ABBA), on however many GPUs the host
lends (one engine per GPU). Claims 5, 6 and 10 are counts and dtypes, not timings: no
verdict to restate. On one GPU the DDP/FSDP2 steps run with a world size of 1 (the
collectives have no peer), so these verdicts are about compile and resharding on one GPU,
not the claims' 2- and 8-GPU communication.

    python3 benchmarks/gpu/claims_ab.py OUT_DIR [ROUNDS] [--budget S] [--small]   (--small: CPU check)
"""
import sys
import time

import torch

from nbtools import Lab, StepConfig

args = [a for a in sys.argv[1:] if not a.startswith("--")]
out, rounds = args[0], int(args[1]) if len(args) > 1 else 5
budget = float(sys.argv[sys.argv.index("--budget") + 1]) if "--budget" in sys.argv else 1e9
size = "small" if "--small" in sys.argv else "auto"
steps = dict(size=size, warmup=3, steps=10, profiled=0)
ddp = StepConfig(scenario="ddp-train", **steps)
fsdp = StepConfig(scenario="fsdp2-train", autocast="bf16", **steps)
backend = "inductor" if torch.cuda.is_available() else "aot_eager"
# cheapest first (no compile); the compiled claims run at most 3 rounds: with cache="fresh"
# every alternation compiles again (from the FX-graph cache after the first)
CLAIMS = [
    ("11: FSDP2 keeping gathered parameters (reshard A, no reshard B)", fsdp,
     fsdp.replace(reshard_after_forward=False), rounds),
    ("4: compile + DDP is slower (eager A, compile=default B)", ddp,
     ddp.replace(compile="default", backend=backend), min(rounds, 3)),
    ("9: backends under FSDP2 bf16 (no compile A, inductor B)", fsdp,
     fsdp.replace(compile="default", backend=backend), min(rounds, 3)),
]
print(f"torch {torch.__version__} cuda {torch.version.cuda} "
      f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu'} "
      f"x {torch.cuda.device_count()}, rounds {rounds}", flush=True)
t0 = time.perf_counter()
verdicts = []
with Lab(history=f"{out}/runs/claims_ab", echo=False) as lab:
    print(lab, f"up in {lab.startup_s:.1f} s", flush=True)
    for name, a, b, n in CLAIMS:
        if time.perf_counter() - t0 > budget:
            print(f"claim {name}: not run (budget of {budget:.0f} s spent)", flush=True)
            continue
        cmp = lab.ab(a, b, rounds=n)
        v = cmp.verdict
        verdicts.append((name, v))
        print(f"claim {name}: A {cmp.table.set_index('metric').at['step_ms', 'a']:.3f} ms, "
              f"B {cmp.table.set_index('metric').at['step_ms', 'b']:.3f} ms (medians over "
              f"rounds); ratio {v.ratio:.3f} [{v.low:.3f}, {v.high:.3f}]: {v.text}", flush=True)
print("\nverdicts:")
for name, v in verdicts:
    print(f"  claim {name}: {v.text}")
print(f"total {time.perf_counter() - t0:.0f} s")
