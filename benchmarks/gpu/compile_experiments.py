"""Compile-event experiments on a real lab (issue 4's GPU lines), printed as tables.

    python benchmarks/gpu/compile_experiments.py OUT_DIR [varlen,batch]

1. varlen-train with compile on: dynamic=static (a recompile per new length, up to the
   limit) vs auto (automatic dynamic) vs mark (mark_dynamic) vs bucketed padding.
2. tp-mlp-infer under reduce-overhead with a changing batch size (cache=continue, so the
   compiled state carries over): cudagraph records / re-records / skips, graphs, memory.
Writes every run to OUT_DIR/runs and an HTML report to OUT_DIR/compile_experiments.html.
"""
import sys
import time
from pathlib import Path

from nbtools import Lab, StepConfig, export_html
from nbtools.cli.main import format_table
from nbtools.lab.keep_going import run_or_keep

out = Path(sys.argv[1] if len(sys.argv) > 1 else "compile-experiments")
parts = (sys.argv[2] if len(sys.argv) > 2 else "varlen,batch").split(",")
out.mkdir(parents=True, exist_ok=True)


def show(runs, title):
    text = f"== {title}\n" + format_table(runs)
    for r in runs:
        ce = r.compile_events
        if len(ce):
            kinds = ce[ce["rank"] == 0]["kind"].value_counts()
            text += f"\n  {r.run_id} rank 0 compile events: " + ", ".join(f"{k}={v}" for k, v in kinds.items() if v)
            rec = ce[(ce["rank"] == 0) & ce["kind"].isin(["recompile", "limit_hit", "cudagraph_skip",
                                                           "cudagraph_rerecord"])]
            for _, row in rec.head(3).iterrows():
                text += f"\n     {row['kind']} step {row['step']}: {str(row['reason'])[:160]}"
    print(text, flush=True)
    with open(out / "compile_experiments.txt", "a") as f:
        f.write(text + "\n\n")


def run(lab, cfg):
    return run_or_keep(lab, cfg, on_failure=lambda e: print(f"failed: {e}", flush=True))


with Lab(history=out / "runs", echo=False) as lab:
    print(f"lab: {lab.world_size} ranks on {lab.device_type}", flush=True)
    varlen, batches = [], []
    if "varlen" in parts:
        base = StepConfig(scenario="varlen-train", compile="default", size="small", warmup=12,
                          steps=6, profiled=2)
        t = time.perf_counter()
        varlen = [run(lab, base.replace(dynamic=d)) for d in ("static", "auto", "mark")]
        varlen.append(run(lab, base.replace(dynamic="static", seq_schedule="bucketed")))
        show(varlen, f"varlen-train, size small, compile default ({time.perf_counter() - t:.0f} s)")

    if "batch" in parts:
        ro = StepConfig(scenario="tp-mlp-infer", compile="reduce-overhead", cache="continue",
                        warmup=3, steps=10, profiled=2)
        t = time.perf_counter()
        for b in (1, 2, 4, 8, 2, 1):
            batches.append(run(lab, ro.replace(batch=b)))
            show(batches[-1:], f"tp-mlp-infer reduce-overhead batch {b}, cache=continue "
                               f"({time.perf_counter() - t:.0f} s so far)")
    export_html(out / "compile_experiments.html", varlen + batches,
                notes="Compile events on 2 GPUs: varying sequence lengths under each dynamic "
                      "policy, and reduce-overhead with a changing batch size.")
