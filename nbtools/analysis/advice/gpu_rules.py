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


RULES = (launch_bound,)
