"""Client-side helpers the claim notebooks (notebooks/0*.ipynb) call, so a notebook cell stays a few
lines: sweeps, one-row-per-run tables, counts read off a run's timeline, and custom step
functions for experiments the built-in scenarios cannot express.

Client side: ``table``, ``speedup``, ``compile_counts``, ``compile_signatures``,
``compiled_regions``, ``collectives``, ``graph_capture``, ``sync_counts`` / ``sync_totals``,
``lockstep``, ``tokens_per_s``: pure functions of Runs (lab runs, or the recorded H200
profiles of ``recorded_h200``). ``sweep``, ``run_reporting``, ``engine_log`` and the
``*_study`` functions drive the lab.

Engine side: the step classes and the buffers they report into live in
``nbtools.claim_steps`` (re-exported here, so notebooks write ``X.DDPAccumStep``).
"""
from __future__ import annotations

import hashlib
import itertools
import logging
import time

import numpy as np
import pandas as pd

from .claim_steps import (DDP_OPTIMIZER_LOG, CompileCacheStep, DDPAccumStep,  # noqa: F401
                          DtypeProbeStep, RankDivergenceStep, _log_start, _log_stop)
from .config import ConfigError, StepConfig

# -- client: sweeps and tables ------------------------------------------------------------
# How a column is reduced over ranks in ``table``: a step waits for the slowest rank, and
# data-parallel throughput is the sum of what each rank processes.
_MAX = ("step_ms", "p10_ms", "p90_ms", "compile_s", "compiles", "recompiles", "graph_breaks",
        "graphs", "cudagraph_skips", "peak_mem_mb", "rss_mb", "exposed_comm_ms", "syncs")
_SUM = ("items_per_s", "tflops")
COLUMNS = ("step_ms", "p90_ms", "items_per_s", "compile_s", "compiles", "recompiles",
           "graph_breaks", "graphs", "compute_ms", "comm_ms", "exposed_comm_ms", "overlap_pct",
           "compute_busy_pct", "gpu_busy_pct", "cpu_busy_pct", "graph_coverage_pct", "peak_mem_mb")


def sweep(lab, base: StepConfig, **field_values) -> list:
    """One run per combination of the given fields' values (cross product, in the order
    given), e.g. ``sweep(lab, cfg, compile=["off", "default"], batch=[1, 8])``.

    A combination the config rejects is skipped with the reason printed; a run that fails
    is kept (its Run has the errors) and the lab is restarted if it has to be."""
    from .cluster import RunFailed
    names = list(field_values)
    runs = []
    for combo in itertools.product(*(field_values[n] for n in names)):
        change = dict(zip(names, combo))
        try:
            cfg = base.replace(**change)
            cfg.check_device(lab.device_type)
        except ConfigError as e:
            print(f"skipped {change}: {e}")
            continue
        t = time.perf_counter()
        try:
            run = lab.run(cfg)
        except RunFailed as e:
            run = e.run
            if lab.needs_restart:
                lab.restart()
        runs.append(run)
        s = run.summary
        ms = f"{s['step_ms'].max():.3g} ms/step" if len(s) and "step_ms" in s else "no summary"
        print(f"{_describe(change)}: {run.status}, {ms} ({time.perf_counter() - t:.1f} s)")
    return runs


def _describe(change: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in change.items()) or "base"


def varying_fields(runs) -> list:
    """The config fields whose value differs between the runs."""
    cfgs = [r.config for r in runs if r.config is not None]
    if len(cfgs) < 2:
        return []
    d = cfgs[0].to_dict()
    return [k for k in d if any(c.to_dict()[k] != d[k] for c in cfgs[1:])]


def _field(cfg, name):
    """A config field's value for a table; the backend of an eager run is "-"."""
    if cfg is None:
        return None
    if name == "backend" and not cfg.compiled:
        return "-"
    return getattr(cfg, name)


def table(runs, columns=COLUMNS, per_rank: bool = False, fields=None) -> pd.DataFrame:
    """One row per run (or per run and rank): the config fields that vary between the runs
    (or ``fields``), then ``columns`` from each summary. Over ranks: times and counts take
    the slowest/largest rank, items_per_s and tflops the sum (for tensor parallelism, whose
    ranks share one batch, items_per_s the slowest rank), the rest the mean. Computed
    columns (not per rank): ``tokens_per_s`` and ``padding_pct`` (real tokens, see
    tokens_per_s), ``n_<kind>`` (compile events of that kind, e.g. n_limit_hit) and
    ``<kind>_per_step`` (collectives, e.g. all_reduce_per_step). Missing columns are NaN."""
    runs = [runs] if not isinstance(runs, (list, tuple)) else list(runs)
    fields = varying_fields(runs) if fields is None else list(fields)
    rows = []
    for run in runs:
        head = {f: _field(run.config, f) for f in fields}
        head["run"] = run.run_id
        s = run.summary
        if per_rank and len(s):
            for _, r in s.iterrows():
                rows.append({**head, "rank": int(r["rank"]),
                             **{c: r[c] if c in s else np.nan for c in columns}})
            continue
        row = dict(head)
        tp = run.config is not None and run.config.resolved_parallel == "tp"
        for c in columns:
            if c in _DERIVED or c.startswith("n_") or c.endswith("_per_step"):
                row[c] = _derived(run, c) if run.ok else np.nan
                continue
            if not len(s) or c not in s:
                row[c] = np.nan
                continue
            v = pd.to_numeric(s[c], errors="coerce")
            if c in _MAX:
                row[c] = v.max()
            elif c in _SUM:
                row[c] = v.min() if (tp and c == "items_per_s") else v.sum()
            else:
                row[c] = v.mean()
        row["status"] = run.status
        row["flags"] = "; ".join(run.flags)
        rows.append(row)
    return pd.DataFrame(rows)


# Columns ``table`` computes rather than reads from the summary (any ``n_<kind>`` of compile
# event and ``<collective>_per_step`` too).
_DERIVED = ("tokens_per_s", "steady_tokens_per_s", "padding_pct")


def _derived(run, c: str) -> float:
    if c in ("tokens_per_s", "steady_tokens_per_s"):   # data parallel: ranks' throughputs add up
        return float(tokens_per_s(run)[c].sum())
    if c == "padding_pct":
        return float(tokens_per_s(run)["padding_pct"].mean())
    if c.startswith("n_"):        # compile events of one kind, largest count over ranks
        ce = run.compile_events
        n = ce[ce["kind"] == c[2:]].groupby("rank").size() if len(ce) else pd.Series(dtype=int)
        return float(n.max()) if len(n) else 0.0
    col = collectives(run)        # <kind>_per_step: mean over ranks and profiled steps
    kind = c[:-len("_per_step")]
    return float(col[kind].mean()) if kind in col else 0.0


# -- client: counts read off a run's timeline ------------------------------------------
_KINDS = (("allreduce", "all_reduce"), ("allgather", "all_gather"),
          ("reducescatter", "reduce_scatter"), ("broadcast", "broadcast"),
          ("alltoall", "all_to_all"), ("sendrecv", "send_recv"), ("barrier", "barrier"))


def _kind(name: str) -> str:
    n = name.lower().replace("_", "")
    return next((k for key, k in _KINDS if key in n), "other")


def _gpu_lane(ev) -> np.ndarray:
    return ev["lane"].astype(str).str.startswith("cuda:").to_numpy()


def _anchor_ts(ev: pd.DataFrame, rows: pd.DataFrame) -> np.ndarray:
    """For GPU rows: the start of the CPU call that launched each (same rank and
    correlation; a graph replay's kernels link to their cudaGraphLaunch). Else own start."""
    if not len(rows):
        return np.zeros(0, np.int64)
    cpu = ev[~_gpu_lane(ev) & ev["category"].isin(["runtime", "sync"]) & (ev["correlation"] >= 0)]
    launch = cpu.groupby(["rank", "correlation"])["ts_ns"].min()
    key = pd.MultiIndex.from_arrays([rows["rank"].to_numpy(), rows["correlation"].to_numpy()])
    return launch.reindex(key).fillna(pd.Series(rows["ts_ns"].to_numpy(), index=key)).to_numpy(np.int64)


def collective_events(run) -> pd.DataFrame:
    """One row per collective executed in the profiled steps: rank, step, kind (all_reduce,
    all_gather, ...), name, ts_ns (on GPU: when the CPU launched it), graph. GPU ranks: NCCL
    kernels; CPU ranks: gloo's own ``gloo:*`` events (one per collective, unlike the nested
    c10d/functional ranges around it)."""
    ev = run.events
    cols = ["rank", "step", "kind", "name", "ts_ns", "graph"]
    if not len(ev):
        return pd.DataFrame(columns=cols)
    comm = (ev["category"] == "communication").to_numpy()
    gpu = _gpu_lane(ev)
    if (comm & gpu).any():
        rows = ev[comm & gpu]
        ts = _anchor_ts(ev, rows)
    else:
        rows = ev[comm & ~gpu & ev["name"].astype(str).str.startswith("gloo:").to_numpy()]
        ts = rows["ts_ns"].to_numpy(np.int64)
    names = rows["name"].astype(str)
    return pd.DataFrame({"rank": rows["rank"].to_numpy(), "step": rows["step"].to_numpy(),
                         "kind": [_kind(n) for n in names], "name": names.to_numpy(),
                         "ts_ns": ts, "graph": rows["graph"].to_numpy()})[cols]


def ranges(run, prefix: str) -> pd.DataFrame:
    """CPU-lane events whose name starts with ``prefix``: record_function ranges ("micro 0")
    or ops such as "Torch-Compiled Region: 0/1" (a compiled graph running). Columns: rank,
    step, name, ts_ns, end_ns."""
    ev = run.events
    if not len(ev):
        return pd.DataFrame(columns=["rank", "step", "name", "ts_ns", "end_ns"])
    m = ev["category"].isin(["annotation", "cpu_op"]).to_numpy() & ~_gpu_lane(ev) & \
        ev["name"].astype(str).str.startswith(prefix).to_numpy()
    r = ev[m]
    return pd.DataFrame({"rank": r["rank"].to_numpy(), "step": r["step"].to_numpy(),
                         "name": r["name"].astype(str).to_numpy(), "ts_ns": r["ts_ns"].to_numpy(),
                         "end_ns": (r["ts_ns"] + r["dur_ns"]).to_numpy()})


def collectives(run, within: str | None = None) -> pd.DataFrame:
    """Collectives per profiled step and rank, by kind (a column each). With ``within``,
    per record_function range whose name starts with it (e.g. "micro" for the
    micro-steps of DDPAccumStep): a collective belongs to the range it started (GPU: was
    launched) in; ranges with none get zeros."""
    ce = collective_events(run)
    ce = ce[ce["step"] >= 0]
    keys = ["rank", "step"]
    if within is not None:
        rg = ranges(run, within)
        ce = ce.assign(range=_containing(ce, rg))
        ce = ce[ce["range"].notna()]
        keys = ["rank", "step", "range"]
    counts = ce.groupby(keys + ["kind"]).size().unstack("kind", fill_value=0) if len(ce) \
        else pd.DataFrame()
    if within is not None:      # every range, with or without collectives
        idx = pd.MultiIndex.from_frame(rg[["rank", "step", "name"]].rename(columns={"name": "range"}))
        counts = counts.reindex(idx.union(counts.index) if len(counts) else idx, fill_value=0)
    out = counts.reset_index()
    out.columns.name = None
    return out


def _containing(ce: pd.DataFrame, rg: pd.DataFrame) -> list:
    out = []
    for rank, ts in zip(ce["rank"].to_numpy(), ce["ts_ns"].to_numpy()):
        hit = rg[(rg["rank"] == rank) & (rg["ts_ns"] <= ts) & (rg["end_ns"] > ts)]
        # nested ranges: the innermost (latest start) wins
        out.append(hit.sort_values("ts_ns")["name"].iloc[-1] if len(hit) else None)
    return out


def graph_capture(run) -> pd.DataFrame:
    """Per rank, per profiled step (mean): kernels, those replayed from a CUDA graph,
    NCCL kernels and NCCL kernels inside a graph, and the CPU's launch calls
    (cudaLaunchKernel-like vs cudaGraphLaunch). All zero on CPU ranks (no CUDA)."""
    ev = run.events
    cols = ["rank", "kernels", "graph_kernels", "comm_kernels", "comm_in_graph",
            "kernel_launches", "graph_launches"]
    if not len(ev):
        return pd.DataFrame(columns=cols)
    ev = ev[ev["step"] >= 0]
    gpu = _gpu_lane(ev)
    cat = ev["category"].to_numpy()
    kern = gpu & np.isin(cat, ["compute", "communication"])
    comm = kern & (cat == "communication")
    graph = ev["graph"].to_numpy(bool)
    name = ev["name"].astype(str)
    cpu_rt = ~gpu & np.isin(cat, ["runtime", "sync"])
    glaunch = cpu_rt & name.str.contains(r"GraphLaunch", regex=True).to_numpy()
    klaunch = cpu_rt & name.str.contains(r"LaunchKernel|cuLaunch", regex=True).to_numpy()
    df = pd.DataFrame({"rank": ev["rank"].to_numpy(), "kernels": kern, "graph_kernels": kern & graph,
                       "comm_kernels": comm, "comm_in_graph": comm & graph,
                       "kernel_launches": klaunch & ~glaunch, "graph_launches": glaunch})
    steps = run.steps[run.steps["phase"] == "profiled"].groupby("rank").size()
    out = df.groupby("rank").sum()
    out = out.div(steps.reindex(out.index).fillna(1).clip(lower=1), axis=0)
    return out.reset_index()[cols]


def sync_counts(run) -> pd.DataFrame:
    """Per rank and name: host-blocking/ordering calls (category "sync":
    cudaStreamSynchronize, cudaDeviceSynchronize, cudaStreamWaitEvent, ...) per profiled
    step. CPU ranks make none (no CUDA runtime): the table is empty there."""
    ev = run.events
    if not len(ev):
        return pd.DataFrame(columns=["rank", "name", "per_step"])
    s = ev[(ev["category"] == "sync") & ~_gpu_lane(ev) & (ev["step"] >= 0)]
    n = run.steps[run.steps["phase"] == "profiled"].groupby("rank").size()
    out = s.groupby(["rank", "name"], observed=True).size().rename("count").reset_index()
    out["per_step"] = out["count"] / out["rank"].map(n).fillna(1).clip(lower=1).to_numpy()
    return out[["rank", "name", "per_step"]]


def sync_totals(run) -> pd.DataFrame:
    """Per rank: sync calls per profiled step in all (0 where there were none) and which."""
    sc = sync_counts(run)
    ranks = sorted(set(run.events["rank"])) if len(run.events) else []
    g = sc.groupby("rank")
    return pd.DataFrame({"rank": ranks,
                         "syncs_per_step": [float(g.get_group(r)["per_step"].sum()) if r in g.groups
                                            else 0.0 for r in ranks],
                         "which": [", ".join(sorted(map(str, g.get_group(r)["name"])))
                                   if r in g.groups else "" for r in ranks]})


def lockstep(run) -> dict:
    """How far apart ranks start the same collective (profiled steps): median and max
    start skew in µs over all collectives matched across ranks (analysis.collective_skew)."""
    from .analysis import collective_skew
    sk = collective_skew(run.events)
    sk = sk[sk["step"] >= 0] if len(sk) else sk
    if not len(sk):
        return dict(collectives=0, median_skew_us=np.nan, max_skew_us=np.nan)
    return dict(collectives=len(sk), median_skew_us=float(sk["skew_us"].median()),
                max_skew_us=float(sk["skew_us"].max()))


def compile_signatures(run) -> pd.DataFrame:
    """Per rank: what it compiled, as the lab's divergence check sees it (kind, frame name,
    ops, guards of every compile / recompile / graph break / limit hit, in order), with a
    short hash: equal hashes = the ranks compiled the same graphs."""
    ce = run.compile_events
    kinds = ("compile", "recompile", "compile_failed", "graph_break", "limit_hit")
    rows = []
    for rank in sorted(set(run.summary["rank"]) if len(run.summary) else set()):
        c = ce[(ce["rank"] == rank) & ce["kind"].isin(kinds)].sort_values("ts_ns") if len(ce) else ce
        sig = [[str(k), str(n), int(o), int(g)] for k, n, o, g in
               zip(c["kind"], c["name"], c["ops"], c["guards"])] if len(c) else []
        rows.append(dict(rank=rank, events=len(sig),
                         compiles=sum(s[0] in ("compile", "recompile") for s in sig),
                         recompiles=sum(s[0] == "recompile" for s in sig),
                         ops=sum(s[2] for s in sig),
                         signature=hashlib.sha1(repr(sig).encode()).hexdigest()[:12]))
    return pd.DataFrame(rows)


def tokens_per_s(run) -> pd.DataFrame:
    """Real (unpadded) tokens per second of an LM scenario's measured steps, per rank.
    ``tokens_per_s``: summed tokens / summed step time, so recompiles inside the measured
    steps count (an epoch's view). ``steady_tokens_per_s``: mean tokens per step / median
    step time (what the steps cost once compiled). items_per_s counts batch x maximum
    length instead."""
    from .scenarios import seq_len_at, sizes
    import torch
    cfg = run.config
    _, batch, seq = sizes(cfg, torch.device(run.env.get("device", "cpu").split(":")[0]))
    st = run.steps[run.steps["phase"] == "measured"]
    out = []
    for rank, g in st.groupby("rank"):
        lens = [seq_len_at(int(i), seq, cfg.resolved_schedule, cfg.seed) for i in g["step"]]
        real, padded = sum(n for n, _ in lens), sum(p for _, p in lens)
        secs = g["dur_ns"].sum() / 1e9
        out.append(dict(rank=rank, tokens_per_s=batch * real / secs,
                        steady_tokens_per_s=batch * real / len(g) / (g["dur_ns"].median() / 1e9),
                        padding_pct=100 * (1 - real / padded), mean_step_ms=1e3 * secs / len(g)))
    return pd.DataFrame(out)


def compiled_regions(run) -> pd.DataFrame:
    """Which compiled graphs ran in the profiled steps, per rank and step: the profiler's
    "Torch-Compiled Region: F/N" ranges (frame F, N-th compile of it). None: eager."""
    rg = ranges(run, "Torch-Compiled Region")
    rg = rg[rg["step"] >= 0]
    if not len(rg):
        return pd.DataFrame(columns=["rank", "step", "regions", "graphs_run"])
    ids = rg.assign(id=rg["name"].str.replace("Torch-Compiled Region: ", "", regex=False))
    return ids.groupby(["rank", "step"]).agg(
        regions=("id", "size"), graphs_run=("id", lambda x: " ".join(sorted(set(x))))).reset_index()


def compile_counts(runs, kinds=None) -> pd.DataFrame:
    """One row per run: the varying config fields, then ``n_<kind>``: how many compile
    events of each kind the run had (compile, recompile, graph_break, limit_hit,
    cudagraph_record, cudagraph_rerecord, cudagraph_skip, ...; the largest count over
    ranks). ``kinds`` picks the kinds (default: every kind any of the runs had)."""
    runs = [runs] if not isinstance(runs, (list, tuple)) else list(runs)
    kinds = kinds or sorted({k for r in runs for k in r.compile_events["kind"].astype(str)})
    return table(runs, [f"n_{k}" for k in kinds]).drop(columns=["status", "flags"])


def speedup(base_runs, new_runs, on: str = "batch", names=("eager", "graphs")) -> pd.DataFrame:
    """Pair runs that share ``on`` (e.g. batch): step_ms of each (slowest rank) and
    base / new (> 1: the new one is faster)."""
    a = table(base_runs, ["step_ms"], fields=[on]).set_index(on)["step_ms"]
    b = table(new_runs, ["step_ms"], fields=[on]).set_index(on)["step_ms"]
    out = pd.DataFrame({f"{names[0]}_ms": a, f"{names[1]}_ms": b})
    out["speedup"] = out[f"{names[0]}_ms"] / out[f"{names[1]}_ms"]
    return out.reset_index()


def signatures_equal(run) -> bool:
    """True when every rank compiled the same sequence of graphs (compile_signatures)."""
    sig = compile_signatures(run)
    return bool(len(sig)) and sig["signature"].nunique() == 1


def recorded_h200() -> dict:
    """Profiles recorded on 2 x H200 (torch 2.11, NCCL 2.28.9; tp-mlp-infer, batch 1, 8
    blocks of d=4096, 3 profiled steps; written by benchmarks/gpu/check_assumptions.py and
    kept in the repository as tests/fixtures/h200), loaded as Runs: {"off": eager,
    "reduce-overhead": graph replay}. Empty where that folder is absent (an installed
    package without the repository). They have timelines but no lab summary (step_ms)."""
    from pathlib import Path
    from .trace import load_traces
    folder = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "h200"
    out = {}
    for mode in ("off", "reduce-overhead"):
        files = sorted(folder.glob(f"tp_{mode}_rank*.json.gz"))
        if files:
            out[mode] = load_traces(files)
    return out



def run_reporting(lab, step, cfg: StepConfig):
    """``lab.run(step, cfg)`` and what the step recorded with ``ctx.report``: (Run,
    run.reports). A failed run is returned too (its reports hold the ranks that finished)."""
    from .cluster import RunFailed
    try:
        run = lab.run(step, cfg)
    except RunFailed as e:
        print(f"run failed: {e}")
        run = e.run
        if lab.needs_restart:
            lab.restart()
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
        self._each(_log_start, self.name, self.level)
        return self

    def __exit__(self, *exc):
        rows = [r for rs in self._each(_log_stop, self.name) for r in rs]
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
    sync), the gradient norm at the last step (equal to eager's: same numbers), step_ms."""
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
                b = ddp_buckets(log, [run])
                row.update(graphs=int(run.summary["graphs"].max()),
                           graph_breaks=int(run.summary["graph_breaks"].max()),
                           ddp_optimizer_buckets=int(b["ddp_optimizer_buckets"].max()) if len(b) else 0,
                           all_reduces_per_micro=" ".join(map(str, per)),
                           rank_grad_diff=float(rep["rank_grad_diff"].max()),
                           last_grad_norm=float(rep.sort_values("step")["grad_norm"].iloc[-1]),
                           step_ms=float(run.summary["step_ms"].max()))
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
            rows.append({**last, "step_ms": float(run.summary["step_ms"].max())})
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

