"""Issue 43.5: the lab as a colleague on a GPU host: why the GPU waits, the move that fits,
screened then proven inside a budget it keeps.

    python3 benchmarks/gpu/colleague_cases.py OUT_DIR --cases fsdp-host,llama-cache
    python3 benchmarks/gpu/colleague_cases.py OUT_DIR --cases eager,batch,deep,honest
    python3 benchmarks/gpu/colleague_cases.py OUT_DIR --tiny --cases ...   # CPU smoke test

fsdp-host:   a person's Llama (transformers, LLAMA_1B's shape, --layers decoder layers),
             use_cache off, FSDP2 per-block compile, bf16, AdamW: run.why() (where the
             host's time goes), lab.advise, then lab.explore within --fsdp-budget; the run's
             events and summary saved (OUT/fsdp_host_*.parquet) as a test fixture.
llama-cache: the same model with use_cache on (docs/findings.md §13): the model patch.
eager:       a person's MLP of hand-written activations (chains of elementwise ops), eager:
             explore from it (compile should be found and kept).
batch:       tp-mlp-infer under CUDA graphs at a small batch: explore from it (a larger
             batch, judged on items/s, with its peak memory printed per A/B).
deep:        §13's deep narrow MLP at batch 1, eager (launch-bound: CUDA graphs).
honest:      §13's tp-mlp-infer batch 16, eager (the honest answer).
Everything printed is also written to OUT_DIR/colleague_cases.txt.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from nbtools import Lab, StepConfig, Workload  # noqa: E402


def hand_gelu(x):
    """GELU's tanh form written out, as people do: nine elementwise ops."""
    import math
    import torch
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))


class HandMLP(__import__("torch").nn.Module):
    """Blocks of Linear + a hand-written GELU + a hand-written RMS norm."""

    def __init__(self, depth: int, width: int):
        super().__init__()
        import torch
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for lin in self.layers:
            h = hand_gelu(lin(x))
            x = x + h / (h.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()
        return x.mean(-1, keepdim=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--cases", default="fsdp-host,llama-cache")
    ap.add_argument("--rounds", default="auto")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--fsdp-budget", type=float, default=240)
    ap.add_argument("--budget", type=float, default=90)
    ap.add_argument("--tiny", action="store_true", help="CPU smoke test: tiny sizes, no bf16")
    a = ap.parse_args()
    rounds = a.rounds if a.rounds == "auto" else int(a.rounds)
    cases = a.cases.split(",")
    out = Path(a.out)
    log = open(out / "colleague_cases.txt", "a")

    def say(*parts):
        text = " ".join(str(p) for p in parts)
        print(text, flush=True)
        log.write(text + "\n")
        log.flush()

    def explore(title, *args, budget, **kw):
        """lab.explore, each row said as it ends, then its table, verdict, budget and code."""
        t = time.perf_counter()
        ex = lab.explore(*args, budget_s=budget, rounds=rounds, max_rounds=8,
                         on_step=lambda row: say("   step:", row["change"], "->",
                                                 row["outcome"], "|", row["screen"], "|",
                                                 row["verdict"]), **kw)
        say(f"-- lab.explore({title}, budget_s={budget:.0f}): {time.perf_counter() - t:.0f} s")
        say(ex.steps.drop(columns=["verdict"]).to_string())
        say("-- verdict:", ex.verdict.text)
        say("-- budget:", ex.budget_text)
        for r in ex.rows:        # what each A/B's sides used: memory beside items/s
            if r.get("ab") is not None:
                cmp = ex.comparisons[r["ab"]]
                mem = [float(x.summary["peak_mem_mb"].max()) for x in (cmp.a, cmp.b)]
                ips = [float(x.summary.get("items_per_s", [float("nan")]).max())
                       for x in (cmp.a, cmp.b)]
                say(f"   {r['change']}: peak memory A {mem[0]:,.0f} MB, B {mem[1]:,.0f} MB; "
                    f"items/s A {ips[0]:,.0f}, B {ips[1]:,.0f}")
        say("-- code():\n" + ex.code())
        return ex

    def first_look(title, *args):
        run = lab.run(*args)
        say(f"\n== {title}: {run!r}")
        s = run.summary
        say(f"   step_ms {s['step_ms'].round(3).tolist()}, profiled_step_ms "
            f"{s.get('profiled_step_ms', s['step_ms']).round(3).tolist()}")
        say("-- run.why():\n" + str(run.why()))
        say("-- lab.advise(run):\n" + str(lab.advise(run)))
        return run

    import torch
    say(f"\n#### {time.strftime('%Y-%m-%d %H:%M:%S')} torch {torch.__version__}, "
        f"{torch.cuda.device_count()} x "
        f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'}; "
        f"cases {cases}")
    t0 = time.perf_counter()
    with Lab(history=out / "runs", echo=False) as lab:
        lab.progress = False
        say(f"{lab!r} in {time.perf_counter() - t0:.1f} s")
        if "fsdp-host" in cases or "llama-cache" in cases:
            from nbtools.models import LLAMA_1B, llama
            size = (dict(num_hidden_layers=2) if a.tiny
                    else dict(LLAMA_1B, num_hidden_layers=a.layers))
            shape = dict(batch=2, seq=16) if a.tiny else dict(batch=4, seq=256)
            cfg = StepConfig(scenario="custom", parallel="fsdp2", compile="default",
                             backend="aot_eager" if a.tiny else "inductor",
                             fsdp_compile="per-block", autocast="off" if a.tiny else "bf16",
                             warmup=3, steps=8, profiled=2)
        if "fsdp-host" in cases:
            wl = replace(llama(use_cache=False, name="llama FSDP2", **shape, **size),
                         optimizer=_adamw)
            run = first_look("llama, use_cache off, FSDP2 per-block compile, AdamW", wl, cfg)
            run.events.to_parquet(out / "fsdp_host_events.parquet")
            run.summary.to_parquet(out / "fsdp_host_summary.parquet")
            explore("llama FSDP2 host-bound", wl, cfg, budget=a.fsdp_budget)
        if "llama-cache" in cases:
            wl = replace(llama(use_cache=True, name="llama use_cache on", **shape, **size),
                         optimizer=_adamw)
            first_look("llama, use_cache on, FSDP2 per-block compile", wl, cfg)
            explore("llama use_cache on", wl, cfg, budget=a.budget * 2)
        if "eager" in cases:
            width, depth, b = (64, 4, 8) if a.tiny else (1024, 12, 256)
            wl = Workload(model=lambda: HandMLP(depth, width),
                          batch=lambda step, device: (torch.randn(b, width, device=device),
                                                      torch.zeros(b, 1, device=device)),
                          loss=torch.nn.functional.mse_loss, items=b,
                          name=f"hand-written MLP {depth} x {width}, batch {b}")
            cfg = StepConfig(scenario="custom", warmup=3, steps=10, profiled=1)
            first_look("hand-written MLP, eager", wl, cfg)
            explore("hand-written MLP eager", wl, cfg, budget=a.budget)
        if "batch" in cases:
            # 100 measured steps (~0.2 s): a GPM reading (SM activity) covers 100 ms or more
            cfg = StepConfig(scenario="tp-mlp-infer", batch=4, warmup=5, steps=100, profiled=1,
                             compile="default" if a.tiny else "reduce-overhead",
                             backend="eager" if a.tiny else "inductor")
            first_look("tp-mlp-infer batch 4 under CUDA graphs", cfg)
            explore("tp-mlp-infer batch 4", cfg, budget=a.budget)
        if "deep" in cases:
            import advice_cases
            import cloudpickle
            cloudpickle.register_pickle_by_value(advice_cases)   # the engines have no copy
            from advice_cases import DeepMLP
            d, w = (8, 64) if a.tiny else (48, 512)
            wl = Workload(model=lambda: DeepMLP(d, w),
                          batch=lambda step, device: (torch.randn(1, w, device=device), None),
                          name=f"deep-mlp {d} layers, batch 1")
            cfg = StepConfig(scenario="custom", warmup=5, steps=20, profiled=1)
            first_look("deep-mlp b1 eager", wl, cfg)
            explore("deep-mlp b1 eager", wl, cfg, budget=a.budget * 0.7)
        if "honest" in cases:
            cfg = StepConfig(scenario="tp-mlp-infer", batch=16, warmup=5, steps=20, profiled=1)
            first_look("tp-mlp-infer b16 eager", cfg)
            explore("tp-mlp-infer b16 eager", cfg, budget=a.budget * 0.5)
    say(f"total {time.perf_counter() - t0:.0f} s")
    return 0


def _adamw(params):
    import torch
    return torch.optim.AdamW(params, lr=1e-4)


if __name__ == "__main__":
    sys.exit(main())
