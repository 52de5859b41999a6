"""Two CPU ranks, compile="default" (inductor), each lab cold: one inductor cache folder for
the host's ranks (Lab's default) against one per rank (compile_cache_per="rank").

    PYTHONPATH=$PWD python benchmarks/compile_cache_share.py host,rank,rank,host

Prints, per lab in the order given, the first compiled run's wall time, each rank's
compile seconds and the load average before and after (docs/benchmarks.md, issue 32).
SCEN=ddp-train picks another scenario.
"""
import os
import sys
import time

from nbtools import Lab, StepConfig


def main(order):
    cfg = StepConfig(scenario=os.environ.get("SCEN", "tp-mlp-infer"), compile="default",
                     backend="inductor", warmup=1, steps=2, profiled=0)
    for per in order:
        load = os.getloadavg()[0]
        with Lab(n=2, history=None, echo=False, compile_cache_per=per) as lab:
            t = time.perf_counter()
            run = lab.run(cfg)
            wall = time.perf_counter() - t
        s = run.summary.set_index("rank")["compile_s"].round(1).to_dict()
        print(f"{per}: run {wall:.1f} s, compile_s by rank {s}, "
              f"load {load:.1f}->{os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1].split(",") if len(sys.argv) > 1 else ["host", "rank", "rank", "host"])
