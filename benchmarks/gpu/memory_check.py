"""Issue 25 on a GPU: does StepConfig(memory=True) record the caching allocator's history and
the CUDA-graph private pools, do tooltips get shapes and collective details, and what does
the run's exported HTML weigh? One lab on the visible GPUs (1 rank on one GPU).

    python benchmarks/gpu/memory_check.py OUT_DIR
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd

from nbtools import Lab, StepConfig, export_html


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    lab = Lab(history=out / "runs")
    print(f"{lab} up in {time.perf_counter() - t:.1f} s", flush=True)
    try:
        for cfg in (StepConfig(scenario="tp-mlp-infer", compile="reduce-overhead", memory=True,
                               batch=4, warmup=3, steps=10, profiled=2),
                    StepConfig(scenario="fsdp2-train", memory=True, warmup=2, steps=6,
                               profiled=2)):
            run = lab.run(cfg)
            s = run.summary
            mem = run.memory
            print(f"\n{cfg.scenario} compile={cfg.compile} parallel={cfg.resolved_parallel}: "
                  f"status {run.status}, step_ms {s['step_ms'].round(3).tolist()}")
            print(f"  memory rows {len(mem)}, columns {list(mem.columns)}")
            if len(mem):
                mb = lambda c: round(float(mem[c].max()) / 2**20, 1) if c in mem else None  # noqa: E731
                print(f"  max allocated {mb('allocated')} MB, reserved {mb('reserved')} MB, "
                      f"graph_pool {mb('graph_pool')} MB")
            col = lambda c: s[c].round(1).tolist() if c in s else "absent"  # noqa: E731
            print(f"  summary graph_pool_mb {col('graph_pool_mb')}, peak_mem_mb {col('peak_mem_mb')}")
            det = run.event_details
            print(f"  event_details rows {len(det)}, columns {list(det.columns)}")
            if len(det):
                names = det["name"].astype(str)
                comm = det[names.str.contains("nccl|all_reduce|allreduce|all_gather|"
                                              "reduce_scatter|record_param_comms", case=False)]
                for _, row in pd.concat([comm.head(2), det.head(1)]).iterrows():
                    print(f"    {row['name'][:60]}: {str(row['detail'])[:200]!r}")
            html = export_html(out / f"{cfg.scenario}.html", [run])
            print(f"  exported {html.name}: {html.stat().st_size / 1e6:.2f} MB")
            pf = run.to_perfetto(out / f"{cfg.scenario}.perfetto.json.gz")
            print(f"  perfetto {pf.name}: {pf.stat().st_size / 1e6:.2f} MB")
            for f in run.flags:
                print(f"  flag: {f}")
    finally:
        lab.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-out")))
