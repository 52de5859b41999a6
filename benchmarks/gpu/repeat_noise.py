"""How far apart are identical runs in one lab? (GPU step times move between calls; the
claim-11 matrix and the ddp-train rank gap need the spread *within* one lab to be read.)

    python3 benchmarks/gpu/repeat_noise.py OUT_DIR [REPEATS] [--small]   (--small: CPU check)

Interleaves the configs so drift over time shows up as a spread, not as a difference
between configs. Prints the lab's per-rank table for every run, then the median of each
config's run medians and its range.
"""
import sys

import pandas as pd

from nbtools import Lab, StepConfig
from nbtools.cli.main import format_table

args = [a for a in sys.argv[1:] if a != "--small"]
out, repeats = args[0], int(args[1]) if len(args) > 1 else 3
size = "small" if "--small" in sys.argv else "auto"
fsdp = StepConfig(scenario="fsdp2-train", autocast="bf16", size=size, warmup=3, steps=10, profiled=3)
ddp = StepConfig(scenario="ddp-train", size=size, warmup=3, steps=10, profiled=3)
configs = {"fsdp2 reshard": fsdp, "fsdp2 no-reshard": fsdp.replace(reshard_after_forward=False),
           "ddp eager": ddp, "ddp default": ddp.replace(compile="default", cache="continue")}
rows, runs = [], []
with Lab(history=f"{out}/runs/noise", echo=False) as lab:
    print(lab, f"up in {lab.startup_s:.1f} s", flush=True)
    for rep in range(repeats):
        for name, cfg in configs.items():
            run = lab.run(cfg)
            runs.append(run)
            for _, s in run.summary.iterrows():
                rows.append(dict(config=name, repeat=rep, rank=int(s["rank"]),
                                 step_ms=s["step_ms"], peak_mem_mb=s.get("peak_mem_mb")))
            print(f"{name} #{rep}: " + ", ".join(f"rank {r['rank']} {r['step_ms']:.2f} ms"
                                                for r in rows if r["config"] == name
                                                and r["repeat"] == rep), flush=True)
print(format_table(runs))
df = pd.DataFrame(rows)
agg = df.groupby(["config", "rank"], sort=False).step_ms.agg(["median", "min", "max"])
agg["range_pct"] = 100 * (agg["max"] - agg["min"]) / agg["median"]
pd.set_option("display.width", 200)
print(agg.round(2).to_string())
