"""Issue 51: lab.explore on the GPU side. Two fp32 training steps of our own
(precision_models.py), each explored from eager fp32 (a cold lab, --budget seconds), then
measured by hand on the same card: A/Bs of the start against the configs a person would try.

    python3 benchmarks/gpu/precision_cases.py OUT_DIR --cases gpt,cnn [--budget 360]
    python3 benchmarks/gpu/precision_cases.py OUT_DIR --tiny    # CPU smoke test

Everything printed is also written to OUT_DIR/precision_cases.txt."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from nbtools import Lab, StepConfig, Workload  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--cases", default="gpt,cnn")
    ap.add_argument("--budget", type=float, default=None,
                    help="explore's budget_s; left out, lab.explore's own default")
    ap.add_argument("--hand", default="yes", choices=("yes", "no", "last"),
                    help="'no': the exploration only; 'last': only the last (fullest) hand "
                         "config, for a short device call")
    ap.add_argument("--tiny", action="store_true")
    a = ap.parse_args()
    # explore's own default unless a budget is named: one place says which
    budget_kw = {} if a.budget is None else {"budget_s": a.budget}
    budget_label = "default" if a.budget is None else f"{a.budget:.0f} s"
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "precision_cases.txt", "a")

    def say(*parts):
        text = " ".join(str(p) for p in parts)
        print(text, flush=True)
        log.write(text + "\n")
        log.flush()

    import cloudpickle
    import torch
    import precision_models as M
    cloudpickle.register_pickle_by_value(M)
    say(f"\n#### {time.strftime('%Y-%m-%d %H:%M:%S')} torch {torch.__version__}, "
        f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'}; "
        f"cases {a.cases}, budget {budget_label}")
    t0 = time.perf_counter()
    base = StepConfig(scenario="custom", warmup=3, steps=10, profiled=1)
    wls = {}
    if "gpt" in a.cases:
        gb, gt, kw = (2, 32, dict(vocab=512, d=64, layers=2, heads=4, seq=32)) if a.tiny else \
            (8, 1024, dict())
        v = kw.get("vocab", 32768)
        wls["gpt"] = Workload(
            model=lambda: M.Decoder(**kw),
            batch=lambda step, device, b=gb, t=gt: (torch.randint(0, v, (b, t), device=device),
                                                    torch.randint(0, v, (b, t), device=device)),
            loss=M.lm_loss, items=gb * gt, optimizer=lambda p: torch.optim.AdamW(p, lr=3e-4),
            name=f"decoder 12 x 768, batch {gb} x {gt}, fp32")
    if "cnn" in a.cases:
        cb, hw = (4, 32) if a.tiny else (64, 160)
        ncls = 100 if a.tiny else 1000
        wls["cnn"] = Workload(
            model=lambda: M.ResNetish(classes=ncls),
            batch=lambda step, device, b=cb: (torch.randn(b, 3, hw, hw, device=device),
                                              torch.randint(0, ncls, (b,), device=device)),
            loss=torch.nn.functional.cross_entropy, items=cb,
            optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
            name=f"resnet-ish 18, batch {cb} x 3 x {hw} x {hw}, fp32")
    half = "bf16" if torch.cuda.is_available() else "off"
    with Lab(history=out / "runs", echo=False) as lab:
        lab.progress = False
        say(f"{lab!r} in {time.perf_counter() - t0:.1f} s")
        for name, wl in wls.items():
            t = time.perf_counter()
            ex = lab.explore(wl, base, **budget_kw,
                             on_step=lambda row: say("   step:", row["change"], "->",
                                                     row["outcome"], "|", row["screen"], "|",
                                                     row["verdict"], "|", row.get("numerics", "")))
            say(f"\n== {name}: lab.explore(budget {budget_label}): {time.perf_counter() - t:.0f} s")
            say("-- start run.why():\n" + str(ex.start_run.why()))
            for adv in ex.advice[:1]:
                say("-- start advice:\n" + str(adv))
            say(ex.steps.drop(columns=["verdict"]).to_string())
            say("-- kept:", ex.kept)
            say("-- verdict:", ex.verdict.text)
            say("-- budget:", ex.budget_text)
            say("-- numerics:", ex.numerics)
            say("-- planned:", ex.planned, "| left untried:", getattr(ex, "left_untried", None))
            say("-- code():\n" + ex.code())
            if a.hand == "no":
                continue
            # by hand: the start against what a person would try, on the same card
            # (two each: one device command may run 10 minutes; the exploration's own best
            # is measured too where it is neither)
            tries = ([dict(autocast=half), dict(autocast=half, compile="default")]
                     if name == "gpt" else
                     [dict(autocast=half, memory_format="channels_last"),
                      dict(autocast=half, memory_format="channels_last", compile="default")])
            if a.hand == "last":
                tries = tries[-1:]
            best = ex.best
            if a.hand != "last" and best != base and best.to_dict() not in [base.replace(**c).to_dict() for c in tries]:
                tries.append({k: v for k, (_, v) in base.diff(best).items()})
            for ch in tries:
                b_cfg = base.replace(**{k: v for k, v in ch.items() if not (half == "off" and k == "autocast")})
                if b_cfg == base:
                    continue
                if b_cfg.compiled:
                    b_cfg = b_cfg.replace(warmup=3)
                t = time.perf_counter()
                cmp = lab.ab((wl, base), (wl, b_cfg), rounds=3)
                say(f"   by hand {ch}: {cmp.verdict.text} ({time.perf_counter() - t:.0f} s)")
    say(f"total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
