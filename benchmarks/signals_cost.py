"""What sampling the machine's signals costs a run's steps (issue 45): the lab with the
sampler off (A) against the lab with it on (B, the default), the same config in
interleaved A B B A rounds, the verdict with its 95 % interval (analysis/verdict.py, as
lab.ab gives it); and, beside it, what one sample costs the sampling thread itself (its
Python lines and reads, timed in this process), as a share of a core at the sampler's rate.

    python benchmarks/signals_cost.py [--rounds 6] [--steps 30] [--scenario tp-mlp-infer]
                                      [--batch N] [--device-type cpu|cuda]

docs/benchmarks.md, "Machine signals: what sampling costs", has the numbers;
benchmarks/gpu/signals.py runs the same rounds on a GPU.
"""
from __future__ import annotations

import argparse
import statistics
import time


def cost_rounds(lab, cfg, rounds: int, run=None, say=print):
    """A = sampling off, B = on, ``rounds`` rounds of A B B A of ``cfg``; ``run(lab, cfg)``
    makes a run (default lab.run). Returns (verdict, A's step_ms, B's, the sampling
    thread's CPU as a % of the seconds it ran, per rank and B run)."""
    from nbtools.analysis.metrics import combine
    from nbtools.analysis.verdict import rounds_verdict
    from nbtools.engine import quiet
    run = run or (lambda lab, cfg: lab.run(cfg))
    engines = lab.client[list(lab.rank_to_engine.values())]
    va, vb, share = [], [], []
    try:
        for k in range(rounds):
            ra, rb = [], []
            for side in "ABBA":
                engines.apply_sync(quiet.configure, sample_machine=side == "B")
                r = run(lab, cfg)
                v = combine(r.summary, "step_ms", r.config) if r.ok else float("nan")
                (ra if side == "A" else rb).append(v)
                for m in (x.get("machine") or {} for x in r.ranks.values()) if side == "B" else ():
                    if m.get("sampler_s"):
                        share.append(100 * m["sampler_cpu_s"] / m["sampler_s"])
            va.append(ra)
            vb.append(rb)
            say(f"round {k + 1}: off {' '.join(f'{x:.3f}' for x in ra)} ms, "
                f"on {' '.join(f'{x:.3f}' for x in rb)} ms")
    finally:
        engines.apply_sync(quiet.configure, **quiet.DEFAULTS)
    return rounds_verdict(va, vb, "step_ms"), sum(va, []), sum(vb, []), share


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--scenario", default="tp-mlp-infer")
    ap.add_argument("--batch", type=int, default=0, help="0: the scenario's own")
    a = ap.parse_args()
    from nbtools import Lab, StepConfig
    from nbtools.engine import signals
    cfg = StepConfig(scenario=a.scenario, warmup=3, steps=a.steps, profiled=0, capture="off",
                     **({"batch": a.batch} if a.batch else {}))
    t0 = time.time()
    with Lab(history=None, echo=False) as lab:
        lab.progress = False
        dev = lab.device_type
        lab.run(cfg)                                  # imports and the first build
        print(f"{lab.world_size} {dev} rank(s); {cfg.label()}; warm-up 3, measured "
              f"{a.steps}; A = sampling off, B = on; {a.rounds} rounds of A B B A", flush=True)
        v, off, on, share = cost_rounds(lab, cfg, a.rounds)
        micro = lab.client[lab.rank_to_engine[0]].apply_sync(signals.sample_cost, dev)
    print(f"\nstep_ms median: off {statistics.median(off):.3f}, on {statistics.median(on):.3f} "
          f"({len(off)} runs a side)")
    print(f"verdict (B = sampling on over A = off): {v.text}")
    print(f"ratio {v.ratio:.4f}, 95 % interval [{v.low:.4f}, {v.high:.4f}], resolved "
          f"{v.resolved}")
    print(f"the sampling thread's own CPU over each B run: median {statistics.median(share):.2f} "
          f"% of one core (max {max(share):.2f} %, {len(share)} rank-runs)")
    print(f"one sample on rank 0's engine: {micro['us_per_sample']:.1f} µs for "
          f"{micro['signals']} signals at {micro['hz']:.0f} a second, a live message "
          f"{micro['us_per_message']:.0f} µs twice a second: {micro['core_pct']:.2f} % of one "
          f"core")
    print(f"total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
