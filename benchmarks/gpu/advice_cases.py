"""Issue 33.6: the advice, and the A/Bs that test it, on a GPU host.

    python3 benchmarks/gpu/advice_cases.py OUT_DIR [--rounds 5] [--cases llama,launch,explore]

llama:   a person's Llama (transformers, ~1 B, FSDP2 over the ranks, per-block compile) with
         use_cache on: what lab.advise says of its run, then lab.explore from it (the fix it
         names, use_cache off, tried on the model as a patch, in rounds); with "eager" in
         --cases also per-block compile against eager (use_cache off) for scale.
launch:  tp-mlp-infer at batch 1, eager: a launch-bound step; the advice, then eager against
         what it suggests (reduce-overhead / CUDA graphs) as an A/B.
deep:    a person's deep narrow MLP (--depth Linear+GELU layers) served at batch 1, eager:
         the advice (launch-bound) and lab.explore from it (GPU only).
explore: lab.explore from tp-mlp-infer b16 eager within a budget, where it exists: the table,
         the verdict and the code (the honest "nothing resolved faster" is a result too).
Everything printed is also written to OUT_DIR/advice_cases.txt.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nbtools import Lab, StepConfig  # noqa: E402


class DeepMLP(__import__("torch").nn.Module):
    def __init__(self, depth: int, width: int):
        super().__init__()
        import torch
        self.layers = torch.nn.Sequential(*[m for _ in range(depth) for m in
                                            (torch.nn.Linear(width, width), torch.nn.GELU())])

    def forward(self, x):
        return self.layers(x)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--rounds", default="5")
    ap.add_argument("--cases", default="llama,launch,explore")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--depth", type=int, default=48, help="deep: the MLP's layers")
    ap.add_argument("--budget", type=float, default=150)
    ap.add_argument("--llama-budget", type=float, default=300)
    ap.add_argument("--tiny", action="store_true", help="CPU smoke test: tiny sizes, no bf16")
    a = ap.parse_args()
    rounds = a.rounds if a.rounds == "auto" else int(a.rounds)
    cases = a.cases.split(",")
    log = open(Path(a.out) / "advice_cases.txt", "w")

    def say(*parts):
        text = " ".join(str(p) for p in parts)
        print(text, flush=True)
        log.write(text + "\n")
        log.flush()

    def explore(title, *args, budget):
        """lab.explore, each A/B said as it ends, then its table, verdict and code."""
        ex = lab.explore(*args, budget_s=budget, rounds=rounds,
                         on_step=lambda row: say("   step:", row["change"], "->",
                                                 row["outcome"], "|", row["verdict"]))
        say(f"-- lab.explore({title}):")
        say(ex.steps.drop(columns=["verdict"]).to_string())
        say("-- verdict:", ex.verdict.text)
        say("-- code():\n" + ex.code())

    import torch
    say(f"torch {torch.__version__}, {torch.cuda.device_count()} x "
        f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'}")
    t = time.perf_counter()
    with Lab(history=Path(a.out) / "runs", echo=False) as lab:
        lab.progress = False
        say(f"{lab!r} in {time.perf_counter() - t:.1f} s")
        if "llama" in cases:
            from nbtools.models import LLAMA_1B, llama
            size = (dict(num_hidden_layers=a.layers) if a.tiny
                    else dict(LLAMA_1B, num_hidden_layers=a.layers))
            shape = dict(batch=2, seq=16) if a.tiny else dict(batch=4, seq=256)
            cached = llama(use_cache=True, name="llama use_cache on", **shape, **size)
            plain = llama(use_cache=False, name="llama use_cache off", **shape, **size)
            cfg = StepConfig(scenario="custom", parallel="fsdp2", compile="default",
                             backend="aot_eager" if a.tiny else "inductor",
                             fsdp_compile="per-block", autocast="off" if a.tiny else "bf16",
                             warmup=3, steps=10, profiled=1)
            run = lab.run(cached, cfg)
            say("\n== llama, use_cache on, FSDP2 per-block compile:", run)
            say("\n".join(run.flags))
            say("-- lab.advise(run):\n" + str(lab.advise(run)))
            explore("llama use_cache on, per-block compile", cached, cfg,
                    budget=a.llama_budget)
            if "eager" in cases:
                eager = cfg.replace(compile="off", backend="inductor")
                cmp = lab.ab((plain, eager), (plain, cfg), rounds=rounds)
                say("-- use_cache off, A: eager, B: per-block compile:", cmp.verdict.text)
        if "launch" in cases:
            cfg = StepConfig(scenario="tp-mlp-infer", batch=1, warmup=5, steps=20, profiled=1)
            run = lab.run(cfg)
            say("\n== tp-mlp-infer b1 eager:", run)
            advice = lab.advise(run)
            say("-- lab.advise(run):\n" + str(advice))
            tries = [s.change for s in advice if s.change] or [dict(compile="reduce-overhead")]
            for change in tries[:2]:
                cmp = lab.ab(cfg, cfg.replace(**change), rounds=rounds)
                say(f"-- A: eager, B: {change}:", cmp.verdict.text)
        if "deep" in cases:
            # a person's deep, narrow net served at batch 1: hundreds of small kernels, each
            # shorter than its launch from Python
            from nbtools import Workload
            wl = Workload(model=lambda: DeepMLP(a.depth, 64 if a.tiny else 512),
                          batch=lambda step, device: (torch.randn(1, 64 if a.tiny else 512,
                                                                  device=device), None),
                          name=f"deep-mlp {a.depth} layers, batch 1")
            cfg = StepConfig(scenario="custom", warmup=5, steps=20, profiled=1)
            run = lab.run(wl, cfg)
            say("\n== deep-mlp b1 eager:", run)
            say("-- lab.advise(run):\n" + str(lab.advise(run)))
            if torch.cuda.is_available():
                explore("deep-mlp b1 eager", wl, cfg, budget=a.budget)
        if "explore" in cases:
            start = StepConfig(scenario="tp-mlp-infer", batch=16, warmup=5, steps=20,
                               profiled=1)
            say("\n== tp-mlp-infer b16 eager, budget", a.budget, "s:")
            explore("tp-mlp-infer b16 eager", start, budget=a.budget)
    say(f"total {time.perf_counter() - t:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
