"""`python -m nbtools demo`: the embedded default sweep on whatever hardware is here, then
one of its questions asked with rounds, so the demo ends with a verdict (issue 44: single
runs read eager 4.48 vs compiled 7.53 ms in one demo and 19.8 vs 12.7 in the next)."""
from __future__ import annotations

import dataclasses
import time

from nbtools.common.units import fmt_number, fmt_range
from nbtools.cli.checks import say
from nbtools.config.step_config import StepConfig


def demo_configs(device_type: str) -> list[StepConfig]:
    """The embedded default sweep: eager vs compiled (and CUDA-graph replay on GPU) for the
    TP inference case, and the DDP wrapping-order trap for training."""
    modes = ["off", "default", "reduce-overhead"] if device_type == "cuda" else ["off", "default"]
    cfgs = [StepConfig(scenario="tp-mlp-infer", compile=m) for m in modes]
    cfgs += [StepConfig(scenario="ddp-train", compile="off"),
             StepConfig(scenario="ddp-train", compile="default"),
             StepConfig(scenario="ddp-train", compile="default", ddp_wrap="compile-outside")]
    return cfgs


DEMO_ROUNDS = 3


def demo_ab(lab):
    """The demo's question asked properly: is compiling the TP inference step faster than
    eager? One run a config (the sweep) cannot say: on 2 shared CPU cores the same config
    read 4.48 ms in one demo and 19.8 ms in the next. So both run again in DEMO_ROUNDS
    rounds of A B B A (lab.ab: a drift cancels within each round), unprofiled (only their
    step times count), one line per round; returns (Comparison, seconds)."""
    a = StepConfig(scenario="tp-mlp-infer", profiled=0)
    b = dataclasses.replace(a, compile="default")
    say(f"\nA/B: {a.scenario}, eager (A) against compile={b.compile} (B), unprofiled: "
        f"{DEMO_ROUNDS} rounds of A B B A ({4 * DEMO_ROUNDS} runs)")
    t = time.perf_counter()

    def on_run(ev):
        if ev["phase"] == "done" and ev["index"] % 4 == 0:
            say(f"   round {ev['round']} of {ev['rounds']} done "
                f"({time.perf_counter() - t:.1f} s)")
    cmp = lab.ab(a, b, rounds=DEMO_ROUNDS, on_run=on_run)
    return cmp, time.perf_counter() - t


def demo_verdict(cmp, seconds: float) -> str:
    """The demo's last lines: the A/B's verdict, and why the single runs above settle
    nothing (the same config's own runs in the A/B, their range)."""
    a = [r.summary["step_ms"].max() for r in cmp.runs_a if r.ok and len(r.summary)]
    same = (f": runs of one config differ (A's {len(a)} runs here read "
            f"{fmt_range(min(a), max(a), fmt_number)} ms)") if a else ""
    return (f"A/B verdict (step_ms, B over A, 95 % interval, {cmp.rounds} rounds in "
            f"{seconds:.0f} s): {cmp.verdict.text}\n"
            f"The sweep above ran each config once, and one run cannot settle which config "
            f"is faster{same}. To ask with rounds: python -m nbtools run --scenario "
            "tp-mlp-infer --compile off,default --rounds 5")
