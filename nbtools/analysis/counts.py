"""Counts read off one Run's tables (events, steps, compile events): collectives per step
or per record_function range, CUDA-graph capture, host syncs, rank lockstep, compile
signatures, real tokens per second, compiled regions.

Pure functions of a Run: a lab's, or the recorded H200 profiles of ``recorded_h200``
(timelines without a lab summary), so a notebook can show GPU behaviour on a CPU machine.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from nbtools.analysis.compile_counts import signature
from nbtools.analysis.step_metrics import collective_skew

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
    rows = []
    for rank in sorted(set(run.summary["rank"]) if len(run.summary) else set()):
        # stable: events at the same ns keep the engine's order, which its hash was made in
        c = ce[ce["rank"] == rank].sort_values("ts_ns", kind="stable") if len(ce) else ce
        sig, sig_hash = signature(zip(c["kind"], c["name"], c["ops"], c["guards"]))
        rows.append(dict(rank=rank, events=len(sig),
                         compiles=sum(s[0] in ("compile", "recompile") for s in sig),
                         recompiles=sum(s[0] == "recompile" for s in sig),
                         ops=sum(s[2] for s in sig), signature=sig_hash))
    return pd.DataFrame(rows)


class ItemsNotReported(ValueError):
    """A run whose ranks did not report their items per measured step (``step_items``):
    saved before nbtools reported them, or made from traces."""


_TOKEN_COLUMNS = ["rank", "tokens_per_s", "steady_tokens_per_s", "padding_pct", "mean_step_ms",
                  "median_step_ms"]


def tokens_per_s(run) -> pd.DataFrame:
    """Real (unpadded) tokens per second of the measured steps, per rank, from the items
    each rank reported per step (tokens for the LM scenarios; a Workload's ``items``).
    ``tokens_per_s``: summed tokens / summed step time, so recompiles inside the measured
    steps count (an epoch's view). ``steady_tokens_per_s``: mean tokens per step / median
    step time (what the steps cost once compiled). ``padding_pct``: the share of the
    inputs that was padding (NaN where they held no items). items_per_s is the steady view
    too: mean real items per step / median step time. ItemsNotReported for a run whose
    ranks did not report their items (saved by an older nbtools, or loaded from traces)."""
    st = run.steps[run.steps["phase"] == "measured"]
    if not len(st):
        raise ItemsNotReported(f"run {run.run_id} has no measured steps (made from traces, or "
                               "failed before measuring): no tokens per second to compute")
    out = []
    for rank, g in st.groupby("rank"):
        rep = (run.ranks.get(int(rank)) or {}).get("step_items")
        if not rep:
            raise ItemsNotReported(
                f"run {run.run_id}: rank {rank} did not report its items per step (saved by "
                "an nbtools older than step_items, or made from traces), so its tokens per "
                "second cannot be computed; run the config again to get them")
        per = dict(zip(rep["step"], zip(rep["real"], rep["padded"])))
        real = sum(per[int(i)][0] for i in g["step"])
        padded = sum(per[int(i)][1] for i in g["step"])
        secs = g["dur_ns"].sum() / 1e9
        out.append(dict(rank=rank, tokens_per_s=real / secs,
                        steady_tokens_per_s=real / len(g) / (g["dur_ns"].median() / 1e9),
                        padding_pct=100 * (1 - real / padded) if padded else np.nan,
                        mean_step_ms=1e3 * secs / len(g),
                        median_step_ms=g["dur_ns"].median() / 1e6))
    return pd.DataFrame(out, columns=_TOKEN_COLUMNS)


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


def signatures_equal(run) -> bool:
    """True when every rank compiled the same sequence of graphs (compile_signatures)."""
    sig = compile_signatures(run)
    return bool(len(sig)) and sig["signature"].nunique() == 1
