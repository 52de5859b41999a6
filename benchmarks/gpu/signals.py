"""The machine's signals on 1 x H200 (issue 45, line 5), three parts, under 8 minutes:

(a) drift: tp-mlp-infer batch 16, 24 identical runs back to back (warm-up 3, measured 10,
    as benchmarks/gpu/aa_rounds.py): per run step_ms and, over its measured steps, the
    mean SM clock, the hottest temperature, the median power and GPU busy; the first 8
    runs against the last 8; every run saved (OUT/history, samples.parquet each), all
    samples in OUT/signals-drift-samples.parquet, the runs' lanes in OUT/signals-report.html.
(b) heavy matmul loop: a Workload of big bf16 matmuls (no GPU setting changed) for about
    90 s of steps: every throttling reason NVML reported and when, the SM clock, power and
    temperature per 10 s, the run's flags; in the same report.
(c) sampling cost: (a)'s config with the sampler off (A) and on (B) in A B B A rounds,
    the verdict with its interval, the sampling thread's own CPU per run and one sample's
    cost (NVML calls included) on the engine.

    python3 benchmarks/gpu/signals.py [OUT] [--parts abc] [--cpu-smoke]

Where NVML is missing on the host ("NVML unavailable" on the first line), add the package
to the wheelhouse (../shared/gpu/wheelhouse.sh nvidia-ml-py) and run again. OUT defaults
to $OUT. --cpu-smoke runs every part end to end on CPU ranks with tiny sizes
(4 runs, a 4-s matmul loop, 2 rounds): what to run before spending GPU time. Prints the
lines docs/findings.md takes, and writes them to OUT/signals.txt.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/
from signals_cost import cost_rounds  # noqa: E402

from nbtools import Lab, StepConfig, Workload, export_html  # noqa: E402
from nbtools.analysis import samples as S  # noqa: E402
from nbtools.analysis.metrics import combine  # noqa: E402
from nbtools.engine import signals  # noqa: E402

T0 = time.time()
LOG = None


def say(text: str = "") -> None:
    print(text, flush=True)
    LOG.write(text + "\n")
    LOG.flush()


def measured(run, signal: str, how=np.nanmean) -> float:
    """One number of a run's signal over its measured steps (the slowest rank's, rank 0 on
    one GPU), NaN where the run has none."""
    vals = [S.during(run.samples, run.steps, r, signal)[0] for r in sorted(set(run.steps["rank"]))]
    vals = [v for v in vals if len(v)]
    return float(how(np.concatenate(vals))) if vals else float("nan")


def matmuls(d: int, n: int, bf16: bool) -> Workload:
    """``n`` chained d x d matmuls a step, the weight scaled so the values stay finite."""
    def model():
        import torch

        class Chain(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.randn(d, d) / d ** 0.5)

            def forward(self, x):
                for _ in range(n):
                    x = x @ self.w
                return x
        m = Chain()
        return m.to(torch.bfloat16) if bf16 else m

    def batch(step, device):     # made on the device: 8192^2 on the CPU took longer than a step
        import torch
        g = torch.Generator(device=device).manual_seed(step)
        return (torch.randn(d, d, generator=g, device=device,
                            dtype=torch.bfloat16 if bf16 else torch.float32),), None
    return Workload(model=model, batch=batch, name=f"matmuls {n} x {d}^2",
                    flops=2.0 * n * d ** 3, items=d)


def drift(lab, cfg, n_runs: int) -> list:
    say(f"(a) drift: {cfg.label()}, warm-up {cfg.warmup}, measured {cfg.steps}; {n_runs} "
        "identical runs back to back")
    # SM activity (GPM, between two 20 ms samples), not NVML's utilisation: that covers up
    # to a second before each read, mostly the time before a 30 ms run's steps
    say(" run  id        step_ms  sm_MHz(mean)  temp_C(max)  power_W(med)  sm_active%  cpu%")
    runs = []
    for i in range(n_runs):
        r = lab.run(cfg)
        runs.append(r)
        say(f"{i + 1:4d}  {r.run_id}  {combine(r.summary, 'step_ms', r.config):8.4f}  "
            f"{measured(r, 'sm_clock_mhz'):12.1f}  {measured(r, 'gpu_temp_c', np.nanmax):11.1f}  "
            f"{measured(r, 'gpu_power_w', np.nanmedian):12.1f}  "
            f"{measured(r, 'sm_active_pct'):10.1f}  {measured(r, 'cpu_pct'):5.1f}")
    k = max(1, min(8, n_runs // 3))
    first = [combine(r.summary, "step_ms", r.config) for r in runs[:k]]
    last = [combine(r.summary, "step_ms", r.config) for r in runs[-k:]]
    span = (runs[-1].started - runs[0].started)
    say(f"first {k} runs {np.mean(first):.4f} ms, last {k} {np.mean(last):.4f} ms: "
        f"{100 * (np.mean(last) / np.mean(first) - 1):+.2f} % over {span:.1f} s; "
        f"temperature {measured(runs[0], 'gpu_temp_c', np.nanmax):.0f} -> "
        f"{measured(runs[-1], 'gpu_temp_c', np.nanmax):.0f} C; SM clock "
        f"{measured(runs[0], 'sm_clock_mhz'):.0f} -> {measured(runs[-1], 'sm_clock_mhz'):.0f} MHz")
    st = np.array([combine(r.summary, "step_ms", r.config) for r in runs])
    temp = np.array([measured(r, "gpu_temp_c", np.nanmax) for r in runs])
    if np.isfinite(temp).sum() > 2 and np.nanstd(temp) > 0:
        ok = np.isfinite(temp) & np.isfinite(st)
        say(f"step_ms against temperature over the runs: Pearson r = "
            f"{np.corrcoef(st[ok], temp[ok])[0, 1]:+.2f}")
    flags = sorted({f for r in runs for f in r.flags})
    say("flags of the drift runs: " + ("; ".join(flags) if flags else "none"))
    return runs


def heavy(lab, d: int, n: int, steps: int, bf16: bool):
    wl = matmuls(d, n, bf16)
    cfg = StepConfig(scenario="custom", warmup=5, steps=steps, profiled=2)
    say(f"\n(b) heavy matmul loop: {wl.name} ({'bf16' if bf16 else 'fp32'}) a step, warm-up 5, "
        f"measured {steps}, profiled 2; no GPU setting changed")
    run = lab.run(wl, cfg)
    smp = run.samples
    say(f"run {run.run_id}: step_ms {combine(run.summary, 'step_ms', run.config):.3f}, "
        f"tflops {combine(run.summary, 'tflops', run.config):.1f}, "
        f"{len(smp)} samples of {smp['signal'].nunique() if len(smp) else 0} signals")
    meta = run.ranks[0].get("machine") or {}
    if meta.get("missing"):
        say("signals this device did not report: " + "; ".join(
            f"{k} ({v})" for k, v in sorted(meta["missing"].items())))
    if meta.get("read_errors"):
        say(f"reads that failed: {meta['read_errors']}")
    t_run = int(smp["ts_ns"].min()) if len(smp) else 0
    ts, bits = S.series(smp, 0, "throttle")
    hot = (np.nan_to_num(bits).astype(np.int64) & S.THROTTLING) != 0
    if hot.any():
        changes = np.flatnonzero(np.diff(np.r_[0, hot.astype(int), 0]))
        say(f"throttling reasons seen in {int(hot.sum())} of {len(hot)} samples:")
        for a, b in zip(changes[::2], changes[1::2]):
            words = sorted({w for x in bits[a:b] for w in S.reason_words(int(x) & S.THROTTLING)})
            say(f"  {(ts[a] - t_run) / 1e9:7.2f} s .. {(ts[b - 1] - t_run) / 1e9:7.2f} s: "
                f"{', '.join(words)}")
    else:
        say("throttling reasons seen: none" + ("" if len(ts) else " (no throttle signal)"))
    say("  t(s)  sm_MHz min/mean  power_W max  temp_C max  gpu_busy%  reasons")
    if len(smp):
        wide = smp[smp["rank"] == 0].pivot_table(index="ts_ns", columns="signal",
                                                 values="value", observed=True)
        bucket = ((wide.index - t_run) // 10_000_000_000).to_numpy()
        for b, g in wide.groupby(bucket):
            col = (lambda k: g[k] if k in g else pd.Series(dtype=float))
            reasons = sorted({w for x in col("throttle").dropna()
                              for w in S.reason_words(int(x))})
            say(f"{10 * b:6d}  {col('sm_clock_mhz').min():7.0f}/{col('sm_clock_mhz').mean():5.0f}"
                f"  {col('gpu_power_w').max():11.1f}  {col('gpu_temp_c').max():10.1f}  "
                f"{col('gpu_util_pct').mean():9.1f}  {', '.join(reasons) or '-'}")
    say("flags: " + ("; ".join(run.flags) if run.flags else "none"))
    cols = [c for c in ("sm_clock_mhz", "sm_clock_min_mhz", "gpu_power_w", "gpu_temp_c",
                        "gpu_util_pct", "sm_active_pct", "throttle", "throttle_seen",
                        "sm_clock_drop_pct") if c in run.summary]
    say(run.summary[["rank"] + cols].to_string(index=False))
    return run


def cost(lab, cfg, rounds: int) -> None:
    say(f"\n(c) sampling cost: {cfg.label()}, A = sampler off, B = on, {rounds} rounds of "
        "A B B A")
    v, off, on, share = cost_rounds(lab, cfg, rounds, say=say)
    say(f"step_ms median: off {np.median(off):.4f}, on {np.median(on):.4f} ({len(off)} runs a side)")
    say(f"verdict (B = sampling on over A = off): {v.text}")
    say(f"ratio {v.ratio:.4f}, 95 % interval [{v.low:.4f}, {v.high:.4f}]")
    if share:
        say(f"the sampling thread's own CPU over each B run: median {np.median(share):.2f} % "
            f"of one core (max {max(share):.2f} %, {len(share)} rank-runs)")
    micro = lab.client[lab.rank_to_engine[0]].apply_sync(signals.sample_cost, lab.device_type)
    say(f"one sample on rank 0's engine: {micro['us_per_sample']:.1f} us for "
        f"{micro['signals']} signals at {micro['hz']:.0f} a second, a live message "
        f"{micro['us_per_message']:.0f} us twice a second: {micro['core_pct']:.2f} % of one core")


def main() -> int:
    global LOG
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default=os.environ.get("OUT"))
    ap.add_argument("--parts", default="abc")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny sizes, CPU ranks")
    a = ap.parse_args()
    if not a.out:
        ap.error("give OUT (or set $OUT): the folder the runs, report and log go to")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    LOG = open(out / "signals.txt", "a")
    smoke = a.cpu_smoke
    n_runs, rounds = (4, 2) if smoke else (24, 6)
    d, n, steps = (256, 4, 400) if smoke else (8192, 32, 1500)
    drift_cfg = StepConfig(scenario="tp-mlp-infer", batch=16, warmup=3, steps=10, profiled=0,
                           **({"size": "small"} if smoke else {}))
    lab_kw = dict(n=2) if smoke else {}
    with Lab(history=out / "history", echo=False, **lab_kw) as lab:
        lab.progress = False
        if lab.device_type != "cuda" and not smoke:
            say("no GPU here: run with --cpu-smoke to check the script on CPU")
            return 2
        info = lab.infos[0] if getattr(lab, "infos", None) else {}
        say(f"{lab!r} {info.get('device_name', lab.device_type)}, up in {lab.startup_s:.1f} s"
            f"{' (CPU smoke: tiny sizes)' if smoke else ''}")
        first = lab.run(drift_cfg)                 # the lab's first run pays for imports
        m = first.ranks[0].get("machine") or {}
        got = sorted(set(first.samples["signal"].astype(str))) if len(first.samples) else []
        say(f"rank 0 samples {len(got)} signals every {m.get('interval_s', float('nan')) * 1e3:.0f}"
            f" ms: {', '.join(got)}")
        if m.get("nvml") or m.get("missing"):
            say(f"not reported: {m.get('nvml') or ''} " + "; ".join(
                f"{k} ({v})" for k, v in sorted((m.get("missing") or {}).items())))
        report = []
        if "a" in a.parts:
            runs = drift(lab, drift_cfg, n_runs)
            report += runs
            frames = [r.samples.assign(run=r.run_id) for r in runs]
            pd.concat(frames, ignore_index=True).to_parquet(out / "signals-drift-samples.parquet")
            say(f"(a) took {time.time() - T0:.0f} s so far")
        if "b" in a.parts:
            report.append(heavy(lab, d, n, steps, bf16=not smoke))
            say(f"(b) took {time.time() - T0:.0f} s so far")
        if "c" in a.parts:
            cost(lab, drift_cfg, rounds)
        if report:
            path = export_html(out / "signals-report.html", report,
                               notes="benchmarks/gpu/signals.py: the drift runs and the heavy "
                               "matmul loop, each with its machine signals under the timeline")
            say(f"\nreport: {path} ({path.stat().st_size / 2**20:.1f} MB); runs and their "
                f"samples: {out / 'history'}")
    say(f"total {time.time() - T0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
