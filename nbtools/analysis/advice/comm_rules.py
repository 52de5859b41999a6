"""Advice from a run's communication: the summary's columns (exposed_comm_ms, comm_ms,
profiled_window_ms, overlap_pct, measured over the profiled steps) and who waits for whom
in the captured collectives (analysis/straggler.py). Pure: no torch."""
from __future__ import annotations

from nbtools.analysis.advice.suggestion import Suggestion, ab_cost
from nbtools.config.engine_notes import sharded_whole
from nbtools.config.script_code import fsdp_lines
from nbtools.analysis.straggler import attribute, sentence

# Exposed communication below this share of the profiled step is not worth a field change:
# on 2 x H200 identical runs already differ by 8-30 % (docs/ab.md)
EXPOSED_SHARE = 0.10


def _exposed(run):
    """(share, exposed ms, window ms, overlap %, ranks) on the rank with the largest
    exposed share, or None when the summary has no timeline columns."""
    sm = run.summary
    if not len(sm) or not {"exposed_comm_ms", "profiled_window_ms"} <= set(sm.columns):
        return None
    sm = sm[(sm["profiled_window_ms"] > 0) & sm["exposed_comm_ms"].notna()]
    if not len(sm):
        return None
    share = sm["exposed_comm_ms"] / sm["profiled_window_ms"]
    row = sm.loc[share.idxmax()]
    return (float(share.max()), float(row["exposed_comm_ms"]), float(row["profiled_window_ms"]),
            float(row.get("overlap_pct", float("nan"))),
            tuple(int(r) for r in sm.loc[share >= EXPOSED_SHARE, "rank"]))


def fsdp_reshard(run) -> list[Suggestion]:
    """FSDP2 with reshard_after_forward=True whose profiled steps leave at least 10 % of
    the step to communication no compute hides: keeping the gathered parameters from
    forward to backward saves the backward's all-gathers. Score: the exposed share."""
    cfg = run.config
    if cfg is None or cfg.resolved_parallel != "fsdp2" or not cfg.reshard_after_forward:
        return []
    ex = _exposed(run)
    if ex is None or ex[0] < EXPOSED_SHARE:
        return []
    share, ms, window, overlap, ranks = ex
    whole = sharded_whole(run)
    return [Suggestion(
        rule="fsdp-reshard",
        title="Keep FSDP2's gathered parameters until backward (reshard_after_forward=False)",
        change={"reshard_after_forward": False},
        evidence=(f"exposed communication {ms:.2f} ms of a {window:.2f} ms profiled step "
                  f"({share:.0%}; overlap {overlap:.0f} %) on rank(s) "
                  f"{', '.join(map(str, ranks))}, with reshard_after_forward=True"),
        why=("With resharding after forward every block's parameters are all-gathered again "
             "for backward; keeping them removes those all-gathers at the cost of holding the "
             "unsharded parameters through the step (more memory)."
             + (" This model is sharded as one unit (no blocks), so it is all of them."
                if whole else "")),
        code="\n".join(fsdp_lines(False, not whole, cfg.scenario == "custom")
                       + ["# memory: + the unsharded parameters until backward"]),
        cost=ab_cost() + "; watch peak_mem_mb",
        score=min(1.0, share), ranks=ranks)]


_STRAGGLER_FIX = {
    "host": ("# the late rank's host is slow to launch: look at its CPU lane before the\n"
             "# collective (data loading, Python work, logging or a sleep on that rank only);\n"
             "# give every rank the same host work, load data ahead\n"
             "# (DataLoader(num_workers=..., pin_memory=True)),\n"
             "# or cut launches: model = torch.compile(model, mode=\"reduce-overhead\")"),
    "compute": ("# the late rank computes longer before the collective: balance the work (equal\n"
                "# batch and sequence lengths per rank), or check that rank's device (clocks,\n"
                "# other processes: summary sm_clock_mhz, gpu_shared flag)"),
}


def straggler(run) -> list[Suggestion]:
    """One rank the others wait for in the captured collectives, beyond the steps' noise
    (analysis/straggler.py's verdict, the straggler flag's): the fix is on that rank, not
    in a StepConfig field. Score: the longest wait per step over the step."""
    ev = run.events
    att = attribute(ev, run.steps) if ev is not None and len(ev) else None
    v = att and att["straggler"]
    if not v:
        return []
    step = float(v.get("step_ms") or 0.0)
    wait = max(v["waits"].values(), default=0.0)
    cause = {"host": "host-side", "unknown": "late"}.get(v["cause"], "slower compute")
    return [Suggestion(
        rule="straggler",
        title=f"Look at rank {v['rank']}: the others wait for it ({cause})",
        change={},
        evidence=sentence(v) + (f"; a step is {step:.3g} ms" if step else ""),
        why=("A collective completes when its last rank arrives, so every other rank's step "
             "includes the late rank's delay; the cause is on that rank."),
        code=_STRAGGLER_FIX.get(v["cause"], _STRAGGLER_FIX["host"] + "\n"
                                + _STRAGGLER_FIX["compute"]),
        cost=ab_cost("reading its timeline, an edit, then"),
        score=min(1.0, wait / step) if step > 0 else 0.1, ranks=(int(v["rank"]),))]


RULES = (fsdp_reshard, straggler)
