"""Advice from a run's CUDA graphs: inductor skipping them for a compiled graph (its reason
and the edit that removes it). Only GPU ranks capture graphs: on CPU ranks inductor
captures none by design (the run's 'unused' flag says so), which is no skip to fix.
Pure: no torch."""
from __future__ import annotations

from nbtools.analysis.advice.suggestion import Suggestion, ab_cost

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
    if not len(skips) or _on_cpu(run):
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
        cost=ab_cost("an edit, then"),
        score=(1 - cover.min() / 100) if len(cover) else 0.2,
        ranks=tuple(sorted({int(r) for r in skips["rank"]})))]


def _on_cpu(run) -> bool:
    """Every rank ran on the CPU (no CUDA graphs exist there to skip)."""
    dev = str(run.env.get("device", "")) if isinstance(run.env, dict) else ""
    sm = run.summary
    if dev:
        return not dev.startswith("cuda")
    return bool(len(sm)) and "device" in sm and (sm["device"] == "cpu").all()


RULES = (cudagraph_skips,)
