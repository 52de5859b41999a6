"""Identical-config A/As through lab.ab on a GPU: how many does the verdict call resolved at
each rounds count (it should be about 5 % or fewer), and does B read slower or faster in
most (an order or state bias)? Then one real change, to show the rounds still resolve it.

    python3 benchmarks/gpu/aa_rounds.py OUT_DIR [--batch 16] [--counts 3,5,6] [--aas 8]
                                        [--real] [--seed-differs]

--seed-differs makes B's seed differ from A's (the model is rebuilt at every switch, as in an
A/A of two configs that differ in an unused field); otherwise A and B are the same config.
Prints one line per A/A and a table per count; writes every line to OUT_DIR/aa_rounds.txt.
"""
import argparse
import sys
import time

import numpy as np

from nbtools import Lab, StepConfig

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--batch", type=int, default=16)
p.add_argument("--counts", default="3,5,6")
p.add_argument("--aas", type=int, default=8)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--real", action="store_true", help="also eager vs reduce-overhead")
p.add_argument("--real-rounds", type=int, default=5)
p.add_argument("--seed-differs", action="store_true")
a = p.parse_args()
log = open(f"{a.out}/aa_rounds.txt", "a")


def say(text):
    print(text, flush=True)
    log.write(text + "\n")
    log.flush()


A = StepConfig(scenario="tp-mlp-infer", batch=a.batch, warmup=3, steps=a.steps, profiled=0)
B = A.replace(seed=A.seed + 1) if a.seed_differs else A
t0 = time.perf_counter()
with Lab(history=None, echo=False) as lab:
    lab.progress = False
    say(f"{lab!r} {lab.infos[0]['device_name']}, up in {lab.startup_s:.1f} s; A {A.label()}; "
        f"B {'seed+1' if a.seed_differs else 'the same config'}")
    lab.run(A)                                    # the first run of a lab pays for imports
    table = []
    for n in [int(c) for c in a.counts.split(",") if c]:
        res = []
        for i in range(a.aas):
            v = lab.ab(A, B, rounds=n, on_run=lambda e: None).verdict
            res.append(v)
            say(f"rounds {n} A/A {i + 1}: {v.text}")
        slower = sum(v.ratio > 1 for v in res)
        table.append((n, sum(v.resolved for v in res), len(res), slower,
                      float(np.exp(np.mean(np.log([v.ratio for v in res]))))))
    say("rounds  resolved  B slower  geo-mean B/A")
    for n, r, k, s, g in table:
        say(f"{n:6d}  {r:3d}/{k:<4d}  {s:3d}/{k:<4d}  {g:.4f}")
    if a.real:
        C = A.replace(compile="reduce-overhead")
        cmp = lab.ab(A, C, rounds=a.real_rounds, on_run=lambda e: None)
        say(f"real change, eager (A) vs reduce-overhead (B), b{a.batch}, {a.real_rounds} rounds: "
            f"{cmp.verdict.text}")
        say(cmp.table.round(4).to_string(index=False))
say(f"total {time.perf_counter() - t0:.0f} s")
sys.exit(0)
