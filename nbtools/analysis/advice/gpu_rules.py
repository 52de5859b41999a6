"""Advice from a run's GPU timeline columns (run.summary over the profiled steps: idle_ms,
compute_busy_pct, graph_coverage_pct, queue_delay_us_median, profiled_window_ms). Only
GPU ranks have them: a CPU rank's summary says device 'cpu' and gets none of these.
Pure: no torch."""
from __future__ import annotations

from nbtools.analysis.advice.suggestion import Suggestion

# The GPU idle for at least this share of the profiled step, with most kernels launched
# one by one (not from CUDA graphs): on 2 x H200, eager TP at batch 1 idled 64 % of its
# step (2.77 of 4.32 ms); the same step under reduce-overhead 4 % (0.09 of 2.24 ms)
IDLE_SHARE = 0.30
GRAPH_COVERAGE = 50.0
_COLS = {"idle_ms", "profiled_window_ms", "device"}


def launch_bound(run) -> list[Suggestion]:
    """Profiled steps where the GPU sits idle between kernels launched one at a time: the
    host's launches are slower than the kernels. Score: the idle share of the step."""
    cfg, sm = run.config, run.summary
    if cfg is None or not len(sm) or not _COLS <= set(sm.columns):
        return []
    sm = sm[(sm["device"] == "gpu") & (sm["profiled_window_ms"] > 0)]
    if not len(sm):
        return []
    share = sm["idle_ms"] / sm["profiled_window_ms"]
    cover = sm["graph_coverage_pct"].fillna(0.0) if "graph_coverage_pct" in sm else 0.0 * share
    bound = sm[(share >= IDLE_SHARE) & (cover < GRAPH_COVERAGE)]
    if not len(bound):
        return []
    row = bound.loc[(bound["idle_ms"] / bound["profiled_window_ms"]).idxmax()]
    worst = float(row["idle_ms"] / row["profiled_window_ms"])
    # the compiler's CUDA graphs where compile is on or off; our own capture needs
    # compile's mode not to capture already (StepConfig checks which applies)
    change = ({"compile": "reduce-overhead"} if cfg.compile in ("off", "default") and
              cfg.backend == "inductor" else {"cudagraph": "manual"})
    qd = row.get("queue_delay_us_median")
    return [Suggestion(
        rule="launch-bound",
        title="Launch the step as CUDA graphs (reduce-overhead), not kernel by kernel",
        change=change,
        evidence=(f"rank {int(row['rank'])}: the GPU idle {row['idle_ms']:.2f} ms of a "
                  f"{row['profiled_window_ms']:.2f} ms profiled step ({worst:.0%}), compute "
                  f"busy {row.get('compute_busy_pct', float('nan')):.0f} %, "
                  f"{float(cover[row.name]):.0f} % of kernels from CUDA graphs"
                  + (f", a kernel starts {qd:.0f} us after its launch (median)"
                     if qd == qd and qd is not None else "")
                  + f"; rank(s) {', '.join(str(int(r)) for r in bound['rank'])} alike"),
        why=("Each kernel is launched from Python on the host; when a launch takes longer than "
             "the kernel it starts, the GPU waits between kernels, and a CUDA graph replays "
             "the whole step's kernels with one launch."),
        code=("model = torch.compile(model, mode=\"reduce-overhead\")   # CUDA graphs by inductor\n"
              "# or capture the step yourself (static shapes, static input buffers):\n"
              "g = torch.cuda.CUDAGraph()\n"
              "with torch.cuda.graph(g):\n"
              "    out = model(static_x)\n"
              "static_x.copy_(x); g.replay()"),
        cost="one A/B (~10 runs); CUDA graphs hold a memory pool and need static shapes",
        score=min(1.0, worst), ranks=tuple(int(r) for r in bound["rank"]))]


# inductor's skip reasons (torch/_inductor/cudagraph_utils.py, output_code.py: "skipping
# cudagraphs due to <reason>") -> what to change in the compiled code
_SKIP_FIX = (
    ("mutat", "# an in-place op on an input of the compiled function (x.add_(), a buffer, "
              "BatchNorm's\n# running stats): do it outside the function, or on a copy"),
    ("cpu device", "# a CPU tensor inside the graph (torch.tensor(...) without device=, "
                   ".cpu()):\n# create it on the GPU, or pass it in as a GPU tensor"),
    ("multiple devices", "# tensors on more than one device in one graph: move them to "
                         "one device"),
    ("non-Tensor", "# the compiled function takes a non-tensor input: pass tensors (or "
                   "make it a constant)"),
    ("incompatible op", "# an op CUDA graphs cannot capture (.item(), a sync, a CPU op): "
                        "move it out of the\n# compiled function"),
)


def cudagraph_skips(run) -> list[Suggestion]:
    """Inductor skipped CUDA graphs for a compiled graph (reduce-overhead or max-autotune
    asked for them): that graph's kernels launch one by one. The fix is in the compiled
    code, per reason. Score: the share of kernels not from CUDA graphs where the summary
    has graph_coverage_pct, else 0.2 (not measured)."""
    ce = run.compile_events
    skips = ce[ce["kind"] == "cudagraph_skip"] if len(ce) else ce
    if not len(skips):
        return []
    reasons = skips.groupby("reason", observed=True).size().sort_values(ascending=False)
    reasons = reasons[reasons > 0]   # the column is a categorical over every row's reason
    top = reasons.index[0]
    gist = " ".join(top.split("Found from :", 1)[0].split()).rstrip(". ")
    fix = next((t for key, t in _SKIP_FIX if key in top),
               "# read the reason; TORCH_LOGS=perf_hints names the op or input")
    sm = run.summary
    cover = sm["graph_coverage_pct"].dropna() if "graph_coverage_pct" in sm else sm.iloc[:0]
    frame = skips.loc[skips["reason"] == top, "frame"].iloc[0]
    return [Suggestion(
        rule="cudagraph-skip",
        title="Remove what makes inductor skip CUDA graphs",
        change={},
        evidence=(f"{int(skips.groupby('rank').size().max())} graph(s) on a rank ran without "
                  f"CUDA graphs: {gist}" + (f" at {frame}" if frame else "")
                  + (f" ({len(reasons) - 1} other reason(s))" if len(reasons) > 1 else "")
                  + (f"; {cover.min():.0f} % of kernels came from CUDA graphs" if len(cover)
                     else "")),
        why=("CUDA graphs replay recorded kernels on fixed memory, so inductor refuses a graph "
             "that mutates its inputs, touches the CPU or another device, or syncs; that "
             "graph's kernels are then launched one by one."),
        code=fix + "\nmodel = torch.compile(model, mode=\"reduce-overhead\")   # then rerun",
        cost="an edit, then one A/B (~10 runs)",
        score=(1 - cover.min() / 100) if len(cover) else 0.2,
        ranks=tuple(sorted({int(r) for r in skips["rank"]})))]


RULES = (launch_bound, cudagraph_skips)
