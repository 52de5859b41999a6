"""Client side of the per-claim experiments: run a ``claim_steps`` step on the lab and read
back what it reported (``run_reporting``) or logged on the engines (``engine_log``), and the
studies built on them (gradient accumulation under DDP, autocast dtypes, compile-cache
warm starts, available backends).

The step classes and the log capture they call run on the engines and live in
``nbtools.engine.claim_steps``.
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from nbtools.engine.claim_steps import DDP_OPTIMIZER_LOG, DDPAccumStep, DtypeProbeStep, log_start, log_stop
from nbtools.config.step_config import StepConfig
from nbtools.analysis.counts import collectives
from nbtools.analysis.metrics import combine
from nbtools.lab.keep_going import run_or_keep


def run_reporting(lab, step, cfg: StepConfig):
    """``lab.run(step, cfg)`` and what the step recorded with ``ctx.report``: (Run,
    run.reports). A failed run is returned too (its reports hold the ranks that finished)."""
    run = run_or_keep(lab, lab.check(step, cfg), lambda e: print(f"run failed: {e}"))
    return run, run.reports


class engine_log:
    """``with engine_log(lab, name) as log:`` collects what the logger ``name`` emits on
    every engine at ``level`` or above while the block runs (without printing it), then
    ``log.records``: rank, ts, level, message; ``log.by_run(runs)`` adds each record's run."""

    def __init__(self, lab, name: str, level: int = logging.INFO):
        self.lab, self.name, self.level = lab, name, level
        self.records = pd.DataFrame(columns=["rank", "ts", "level", "message"])

    def _each(self, fn, *args):
        return [self.lab.client[e].apply_sync(fn, *args)
                for _, e in sorted(self.lab.rank_to_engine.items())]

    def __enter__(self):
        self._each(log_start, self.name, self.level)
        return self

    def __exit__(self, *exc):
        rows = [r for rs in self._each(log_stop, self.name) for r in rs]
        if rows:
            self.records = pd.DataFrame(rows)
        return False

    def by_run(self, runs) -> pd.DataFrame:
        """Records with the id of the run that was in flight (the last one started before)."""
        runs = sorted(runs, key=lambda r: r.started)
        starts = np.array([r.started for r in runs])
        rec = self.records.copy()
        i = np.searchsorted(starts, rec["ts"].to_numpy(float), side="right") - 1
        rec["run"] = [runs[j].run_id if j >= 0 else None for j in i]
        return rec


def ddp_buckets(log: "engine_log", runs) -> pd.DataFrame:
    """Per run and rank: the buckets (= compiled subgraphs) DDPOptimizer made, from its
    "created N buckets" log line; 0 where it logged nothing (no DDPOptimizer split: eager,
    optimize_ddp off, or one bucket only)."""
    rec = log.by_run(runs)
    n = rec["message"].str.extract(r"created (\d+) buckets")[0].astype(float)
    rec = rec.assign(buckets=n).dropna(subset=["buckets"])
    got = rec.groupby(["run", "rank"])["buckets"].sum()
    rows = [dict(run=r.run_id, rank=k, ddp_optimizer_buckets=int(got.get((r.run_id, k), 0)))
            for r in runs for k in sorted(set(r.summary["rank"]) if len(r.summary) else [])]
    return pd.DataFrame(rows)


def accumulation_study(lab, configs, micro: int = 4, no_sync=(True, False)) -> tuple:
    """Run DDPAccumStep under each config, with and without no_sync. Returns (table,
    runs): per config and no_sync, the graphs Dynamo made, DDPOptimizer's buckets
    (subgraphs), the all-reduces of each micro-step (rank 0, last profiled step), the
    largest gradient difference between ranks after the synchronising micro-step (0: in
    sync), the gradient norm at the last step (equal to eager's: same numbers), DDP's
    reducer buckets as rebuilt in gradient-arrival order (rank 0; empty under
    python_reducer, which bypasses the reducer), step_ms."""
    rows, runs = [], []
    for ns in no_sync:
        step = DDPAccumStep(micro=micro, no_sync=ns)
        for cfg in configs:
            with engine_log(lab, DDP_OPTIMIZER_LOG) as log:
                run, rep = run_reporting(lab, step, cfg)
            runs.append(run)
            row = dict(compile=cfg.compile, backend=cfg.backend if cfg.compiled else "-",
                       optimize_ddp=cfg.optimize_ddp if cfg.compiled else "eager",
                       ddp_wrap=cfg.ddp_wrap if cfg.compiled else "-", no_sync=ns,
                       status=run.status)
            if run.ok:
                c = collectives(run, within="micro")
                c = c[(c["rank"] == 0) & (c["step"] == c["step"].max())] if len(c) else c
                per = c.sort_values("range")["all_reduce"].astype(int).tolist() \
                    if "all_reduce" in c else [0] * len(c)
                last0 = rep[rep["rank"] == 0].sort_values("step").iloc[-1]
                b = ddp_buckets(log, [run])
                row.update(graphs=int(combine(run.summary, "graphs")),
                           graph_breaks=int(combine(run.summary, "graph_breaks")),
                           ddp_optimizer_buckets=int(b["ddp_optimizer_buckets"].max()) if len(b) else 0,
                           all_reduces_per_micro=" ".join(map(str, per)),
                           rank_grad_diff=float(rep["rank_grad_diff"].max()),
                           last_grad_norm=float(rep.sort_values("step")["grad_norm"].iloc[-1]),
                           reducer_buckets=last0["reducer_buckets"],
                           step_ms=combine(run.summary, "step_ms", run.config))
            rows.append(row)
    return pd.DataFrame(rows), runs


def dtype_study(lab, base: StepConfig, compiles=("off", "default"), backend="inductor",
                dtype="bf16", fullgraph: bool = True) -> pd.DataFrame:
    """DtypeProbeStep for autocast off and each scope (forward, forward+loss, step), eager
    and compiled (with ``fullgraph``): one row per combination, rank 0's last step, plus
    step_ms."""
    rows = []
    for comp in compiles:
        for ac, scope in (("off", "forward"), (dtype, "forward"), (dtype, "forward+loss"),
                          (dtype, "step")):
            extra = dict(backend=backend, fullgraph=fullgraph) if comp != "off" else {}
            cfg = base.replace(scenario="custom", compile=comp, autocast=ac, autocast_scope=scope,
                               **extra)
            run, rep = run_reporting(lab, DtypeProbeStep(), cfg)
            if not len(rep):
                rows.append(dict(compile=comp, autocast=ac, scope=scope, status=run.status))
                continue
            last = rep[rep["rank"] == 0].sort_values("step").iloc[-1].to_dict()
            last.pop("rank", None)
            last.pop("step", None)
            rows.append({**last, "step_ms": combine(run.summary, "step_ms", run.config)})
    return pd.DataFrame(rows)


def warmup_table(*reports, skip_steps: int = 0) -> pd.DataFrame:
    """CompileCacheStep reports -> per (share, rank): median seconds until the model was
    ready, of which waiting for rank 0, loading, compiling; FX-graph cache hits and misses
    per cold start, artefact bytes. ``skip_steps`` leaves out the first (process warm-up)."""
    rep = pd.concat([r for r in reports if len(r)], ignore_index=True)
    rep = rep[rep["step"] >= skip_steps]
    return rep.groupby(["share", "rank"]).agg(
        cold_starts=("step", "size"), ready_s=("ready_s", "median"),
        waited_for_rank0_s=("waited_for_rank0_s", "median"), load_s=("load_s", "median"),
        compile_s=("compile_s", "median"), fx_hits=("fx_hits", "median"),
        fx_misses=("fx_misses", "median"), artifact_bytes=("artifact_bytes", "max")).reset_index()


def backends_available() -> dict:
    """torch.compile backends this torch registers, and whether nvfuser is among them."""
    import torch
    names = sorted(torch._dynamo.list_backends(exclude_tags=()))
    return dict(torch=torch.__version__, nvfuser="nvfuser" in names, backends=names)
