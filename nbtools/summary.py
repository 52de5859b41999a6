"""run.summary: one row per rank, from the run's tables and what each engine reported.
Pure: tables and dicts in, a DataFrame out."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .compile_summary import COMPILE_KINDS

# analysis.per_rank columns that are totals over the profiled window: shown per step
_PER_STEP = ("compute_ms", "comm_ms", "memcpy_ms", "exposed_comm_ms", "idle_ms", "syncs")


def step_stats(steps: pd.DataFrame, phase: str = "measured") -> pd.DataFrame:
    """Median, p10, p90 of step time per rank for one phase."""
    s = steps[steps["phase"] == phase]
    if not len(s):
        return pd.DataFrame(columns=["rank", "step_ms", "p10_ms", "p90_ms"])
    ms = s.assign(ms=s["dur_ns"] / 1e6).groupby("rank")["ms"]
    return pd.DataFrame({"step_ms": ms.median(), "p10_ms": ms.quantile(0.1),
                         "p90_ms": ms.quantile(0.9)}).reset_index()


def profiler_overhead(steps: pd.DataFrame) -> pd.DataFrame:
    """rank, profiled_step_ms, profiler_overhead_pct, profiler_noise_pct.

    The profiled steps are compared with the measured ones; a difference is the profiler's
    only when it is larger than the steps' own spread (half their p10-p90 range, of the
    measured steps and, when there are several, the profiled ones). On 2 shared CPU cores
    identical steps vary by tens of percent, and one profiled step can land anywhere in
    that range: 170 % or -34 % from such a pair is noise, not overhead. So the overhead is
    NaN when it is within the noise, negative (a profiler does not speed a step up), or
    when fewer than 3 measured steps leave the spread unknown; noise says how large a
    difference would have to be. Measurable: the profiled median is slower than 9 in 10
    measured steps (their p90) and than the noise."""
    cols = ["rank", "profiled_step_ms", "profiler_overhead_pct", "profiler_noise_pct"]
    meas, prof = (steps[steps["phase"] == p] for p in ("measured", "profiled"))
    if not len(meas) or not len(prof):
        return pd.DataFrame(columns=cols)

    def stats(s):
        ms = s.assign(ms=s["dur_ns"] / 1e6).groupby("rank")["ms"]
        return pd.DataFrame({"med": ms.median(), "p90": ms.quantile(0.9),
                             "half": (ms.quantile(0.9) - ms.quantile(0.1)) / 2, "n": ms.size()})

    m, p = stats(meas), stats(prof)
    both = m.merge(p, left_index=True, right_index=True, suffixes=("_m", "_p"))
    spread = np.where(both["n_p"] >= 3, np.maximum(both["half_m"], both["half_p"]), both["half_m"])
    noise = 100 * spread / both["med_m"]
    over = 100 * (both["med_p"] / both["med_m"] - 1)
    known = (both["n_m"] >= 3).to_numpy()
    # slower than 9 in 10 unprofiled steps, and by more than their spread
    real = known & (both["med_p"] > both["p90_m"]).to_numpy() & (over > noise).to_numpy()
    out = pd.DataFrame({"rank": both.index.to_numpy(), "profiled_step_ms": both["med_p"].to_numpy(),
                        "profiler_overhead_pct": np.where(real, over, np.nan),
                        "profiler_noise_pct": np.where(known, noise, np.nan)})
    return out


def timeline_columns(events, steps) -> pd.DataFrame:
    """analysis.per_rank, with the totals over the profiled window shown per profiled step."""
    from .analysis import per_rank
    n_prof = steps[steps["phase"] == "profiled"].groupby("rank").size()
    pr = per_rank(events)
    for col in _PER_STEP:
        if col in pr:
            pr[col] = pr[col] / pr["rank"].map(n_prof).fillna(1).clip(lower=1).to_numpy()
    return pr


def build(steps, events, compile_events, reports: dict, cfg) -> pd.DataFrame:
    """reports: rank -> the engine's result dict (counts, memory, check, ...)."""
    ranks = sorted(reports)
    base = pd.DataFrame({"rank": np.array(ranks, dtype=np.int32)})
    base = base.merge(step_stats(steps), on="rank", how="left")
    base = base.merge(profiler_overhead(steps), on="rank", how="left")
    rows = []
    for r in ranks:
        rep = reports[r]
        counts = (rep.get("compile") or {}).get("counts", {})
        ce = compile_events[compile_events["rank"] == r] if len(compile_events) else compile_events
        compile_s = float(ce.loc[ce["kind"].isin(COMPILE_KINDS), "dur_ns"].sum()) / 1e9 \
            if len(ce) else 0.0
        items, flops = rep.get("items_per_step", 0), rep.get("flops_per_step", 0.0)
        chk = rep.get("check") or {}
        rows.append(dict(rank=r, host=rep.get("host", ""), compile_s=compile_s,
                         compiles=int(counts.get("compiles", 0)),
                         recompiles=int(counts.get("recompiles", 0)),
                         graph_breaks=int(counts.get("graph_breaks", 0)),
                         graphs=int(counts.get("graphs", 0)),
                         cudagraph_skips=int(counts.get("cudagraph_skips", 0)),
                         peak_mem_mb=rep.get("peak_mem_mb", np.nan),
                         rss_mb=rep.get("rss_mb", np.nan),
                         _items=items, _flops=flops,
                         check_max_rel=chk.get("max_rel", np.nan)))
    base = base.merge(pd.DataFrame(rows), on="rank", how="left")
    base["items_per_s"] = base["_items"] / (base["step_ms"] / 1e3)
    base["tflops"] = base["_flops"] / (base["step_ms"] / 1e3) / 1e12
    base = base.drop(columns=["_items", "_flops"])
    if len(events):
        base = base.merge(timeline_columns(events, steps), on="rank", how="left")
    base["cache"] = cfg.cache if cfg is not None else ""
    return base


def refresh_analysis(run):
    """Recompute the timeline columns of a saved run's summary from its events with the
    current analysis (pure); the step times, compile counts and memory stay as measured."""
    if not len(run.events) or not len(run.summary):
        return run
    pr = timeline_columns(run.events, run.steps)
    keep = [c for c in run.summary.columns if c not in pr.columns or c == "rank"]
    run.summary = run.summary[keep].merge(pr, on="rank", how="left")
    return run


def flags(summary: pd.DataFrame, reports: dict, cfg, divergence: str | None) -> list[str]:
    """What a reader must not miss."""
    out = []
    if divergence:
        out.append(f"divergent ranks: {divergence}")
    compiled = cfg is not None and cfg.compiled and cfg.scenario != "custom" and len(summary)
    outside = compiled and cfg.resolved_parallel == "ddp" and cfg.ddp_wrap == "compile-outside"
    # Under cache="continue" a run may rightly compile nothing new (earlier graphs run).
    if compiled and cfg.cache == "fresh" and "graphs" in summary \
            and int(summary["graphs"].max()) == 0:
        how = "torch.compile(DDP(model))" if outside else "this config"
        out.append(f"0 graphs compiled: {how} ran eagerly (with Dynamo's overhead on top)")
    elif outside and int(summary["graph_breaks"].max()) > 0:
        out.append(f"torch.compile(DDP(model)): Dynamo graph-breaks inside DDP's forward "
                   f"({int(summary['graph_breaks'].max())} breaks); only "
                   f"{int(summary['graphs'].max())} graph(s) came from frames DDP calls, "
                   "outside DDPOptimizer's per-bucket split. See compile_events.")
    unused = sorted({u for rep in reports.values() for u in rep.get("unused", [])})
    out += [f"unused: {u}" for u in unused]
    if len(summary) > 1 and "step_ms" in summary and summary["step_ms"].notna().all():
        lo, hi = summary["step_ms"].min(), summary["step_ms"].max()
        if lo > 0 and hi / lo > 1.25:
            out.append(f"ranks differ in step time: {lo:.3g} .. {hi:.3g} ms")
    for r, rep in sorted(reports.items()):
        chk = rep.get("check")
        if chk and (not chk.get("finite", True) or chk.get("max_rel", 0) > 5e-2):
            out.append(f"rank {r}: compiled {chk['what']} differs from eager by "
                       f"{chk['max_rel']:.2%} (max abs {chk['max_abs']:.3g})")
    return out
