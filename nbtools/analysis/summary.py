"""run.summary: one row per rank, from the run's tables and what each engine reported.
Pure: tables and dicts in, a DataFrame out."""
from __future__ import annotations

import numpy as np
import pandas as pd

from nbtools.analysis.breakdown import rank_table
from nbtools.analysis.compile_counts import COMPILE_KINDS, wall_s
from nbtools.analysis import flags as F
from nbtools.analysis import machine
from nbtools.analysis.straggler import attribute, sentence
from nbtools.common.units import fmt_ms, fmt_number, fmt_pct


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
    """analysis.per_rank, with the step's parts (breakdown.PARTS) as means over the profiled
    steps, each measured inside its step, beside the window they fit in."""
    pr = rank_table(events, steps)
    att = attribute(events)   # wait_ms, last_pct: who waits for whom in collectives
    if att is not None:
        pr = pr.merge(att["per_rank"], on="rank", how="left")
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
        compile_s = wall_s(ce[ce["kind"].isin(COMPILE_KINDS)]) if len(ce) else 0.0
        items, flops = rep.get("items_per_step", 0), rep.get("flops_per_step", 0.0)
        chk = rep.get("check") or {}
        rows.append(dict(rank=r, host=rep.get("host", ""), compile_s=compile_s,
                         compiles=int(counts.get("compiles", 0)),
                         recompiles=int(counts.get("recompiles", 0)),
                         graph_breaks=int(counts.get("graph_breaks", 0)),
                         compile_state=(rep.get("compile_outcome") or {}).get("state", ""),
                         graphs=int(counts.get("graphs", 0)),
                         cudagraph_skips=int(counts.get("cudagraph_skips", 0)),
                         peak_mem_mb=rep.get("peak_mem_mb", np.nan),
                         device_mem_mb=(rep.get("env") or {}).get("gpu_mem_mb", np.nan),
                         graph_pool_mb=rep.get("graph_pool_mb", np.nan),
                         rss_mb=rep.get("rss_mb", np.nan),
                         _items=items, _flops=flops,
                         check_max_rel=chk.get("max_rel", np.nan)))
    base = base.merge(pd.DataFrame(rows), on="rank", how="left")
    # a workload that does not say its items or FLOPs (0, the default) has no throughput to
    # show: NaN ("-"), not 0 TFLOP/s, which read as a measurement
    per_s = base["step_ms"] / 1e3
    base["items_per_s"] = base["_items"].where(base["_items"] > 0) / per_s
    base["tflops"] = base["_flops"].where(base["_flops"] > 0) / per_s / 1e12
    base = base.drop(columns=["_items", "_flops"])
    if len(events):
        base = base.merge(timeline_columns(events, steps), on="rank", how="left")
    state = machine.columns(reports, steps)
    if len(state):
        base = base.merge(state, on="rank", how="left")
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


def flags(summary: pd.DataFrame, reports: dict, cfg, divergence: str | None,
          events: pd.DataFrame | None = None, compile_events: pd.DataFrame | None = None,
          steps: pd.DataFrame | None = None) -> list[str]:
    """What a reader must not miss, each built from the registry (flags.py) and read from
    what the engines reported this run (compile_outcome) and the captured events; never
    re-derived from the config."""
    out = []
    if divergence:
        out.append(F.make("divergent-ranks", what=divergence))
    out += _compile_flags(reports, cfg, compile_events)
    out += _timed_compile_flags(compile_events, steps)
    unused = sorted({u for rep in reports.values() for u in rep.get("unused", [])})
    out += [F.make("unused", what=u) for u in unused]
    out += _timing_flags(summary, events, steps)
    out += machine.flags(summary)
    bad = {r: rep.get("last_value") for r, rep in sorted(reports.items()) if rep.get("nonfinite")}
    if bad:
        out.append(F.make("not-finite", ranks=", ".join(map(str, bad)), value=next(iter(bad.values()))))
    for r, rep in sorted(reports.items()):
        chk = rep.get("check")
        if chk and (not chk.get("finite", True) or chk.get("max_rel", 0) > 5e-2):
            out.append(F.make("check-differs", rank=r, what=chk["what"],
                              rel=fmt_pct(100 * chk['max_rel']), abs=fmt_number(chk['max_abs'])))
    return out


def _compile_flags(reports: dict, cfg, compile_events) -> list[str]:
    oc = {r: rep.get("compile_outcome") or {} for r, rep in reports.items()}
    if not oc or not all(oc.values()):
        return []
    out = []
    outside = cfg is not None and cfg.scenario != "custom" and \
        cfg.resolved_parallel == "ddp" and cfg.ddp_wrap == "compile-outside"
    breaks = max(o["graph_breaks"] for o in oc.values())
    if all(o["state"] == "eager" for o in oc.values()):
        how = ("torch.compile(DDP(model))" if outside else
               "this custom step" if cfg is not None and cfg.scenario == "custom" else
               "this config")
        out.append(F.make("ran-eagerly", how=how))
    elif outside and breaks:
        out.append(F.make("ddp-graph-breaks", breaks=breaks,
                          graphs=max(o["graphs"] for o in oc.values())))
    elif breaks:
        first = _first_row(compile_events, "graph_break")
        out.append(F.make("graph-breaks", n=breaks, frame=first.get("frame") or "?",
                          reason=first.get("reason") or "(no reason recorded)"))
    recompiles = max(o["recompiles"] for o in oc.values())
    if recompiles:
        first = _first_row(compile_events, "recompile")
        limit = " and hit the recompile limit (that frame runs eagerly from then on)" \
            if any(o["limit_hit"] for o in oc.values()) else ""
        out.append(F.make("recompiles", n=recompiles, limit=limit,
                          reason=first.get("reason") or "(no reason recorded)"))
    return out


def _timed_compile_flags(compile_events, steps) -> list[str]:
    """Compiles inside the measured steps: step_ms then times them (a warm-up too short
    for a first compile, or a recompile on new inputs)."""
    if compile_events is None or steps is None or not len(compile_events) or not len(steps):
        return []
    ce = compile_events[compile_events["kind"].isin(("compile", "recompile"))
                        & (compile_events["dur_ns"] > 0)]
    timed = steps[steps["phase"] == "measured"]
    if not len(ce) or not len(timed):
        return []
    per = {}
    for (rank, step), rows in ce.groupby(["rank", "step"]):
        hit = timed[(timed["rank"] == rank) & (timed["step"] == step)]
        if not len(hit):
            continue
        lo, hi = int(hit["ts_ns"].iloc[0]), int(hit["ts_ns"].iloc[0] + hit["dur_ns"].iloc[0])
        spans = sorted((max(lo, int(t)), min(hi, int(t + d)))
                       for t, d in zip(rows["ts_ns"], rows["dur_ns"]))
        ns, end = 0, lo      # nested compiles count once: the union inside the step
        for a, b in spans:
            if b > max(a, end):
                ns += b - max(a, end)
                end = b
        d = per.setdefault(int(rank), {"steps": 0, "ns": 0, "step_ns": 0, "kinds": set()})
        d["steps"] += 1
        d["ns"] += ns
        d["step_ns"] += hi - lo
        d["kinds"] |= set(rows["kind"])
    if not per:
        return []
    worst = max(per, key=lambda r: per[r]["ns"])
    w = per[worst]
    kinds = set().union(*(d["kinds"] for d in per.values()))
    what = ("recompiles (new inputs inside the timed steps: see the recompiles flag)"
            if kinds == {"recompile"} else "first compiles (warm-up too short: raise warmup)"
            if kinds == {"compile"} else "compiles and recompiles")
    m = int((timed["rank"] == worst).sum())
    return [F.make("compiled-in-timed", n=w["steps"], m=m, ranks=", ".join(map(str, sorted(per))),
                   detail=f"rank {worst}: {fmt_ms(w['ns'] / 1e6)} of those steps' "
                          f"{fmt_ms(w['step_ns'] / 1e6)}", what=what)]


def _first_row(compile_events, kind) -> dict:
    if compile_events is None or not len(compile_events):
        return {}
    rows = compile_events[compile_events["kind"] == kind].sort_values(["rank", "ts_ns"])
    return rows.iloc[0].to_dict() if len(rows) else {}


def _timing_flags(summary, events, steps=None) -> list[str]:
    """The straggler where the captured collectives name one; else, when step times
    differ, the spread and why no rank can be named."""
    att = attribute(events, steps) if events is not None and len(events) else None
    if att is not None:
        return [F.make("straggler", sentence=sentence(att["straggler"]))] \
            if att["straggler"] else []
    if len(summary) > 1 and "step_ms" in summary and summary["step_ms"].notna().all():
        lo, hi = summary["step_ms"].min(), summary["step_ms"].max()
        fast = summary.loc[summary["step_ms"].idxmin()]
        slow = summary.loc[summary["step_ms"].idxmax()]
        # apart beyond noise: the slow rank's p10 above the fast rank's p90
        apart = not (fast.get("p90_ms", lo) >= slow.get("p10_ms", hi))
        if lo > 0 and hi / lo > 1.25 and hi - lo >= 0.5 and apart:
            comm = events is not None and len(events) and \
                (events["category"] == "communication").any()
            why = ("the captured collectives did not match across ranks" if comm else
                   "no collectives were captured to say which rank the others wait for "
                   "(capture='full' names it)" if events is None or not len(events) else
                   "the ranks ran no collectives in the captured steps: each runs at its "
                   "own pace")
            return [F.make("step-spread", lo=fmt_number(lo), hi=fmt_number(hi), why=why)]
    return []
