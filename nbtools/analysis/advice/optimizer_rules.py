"""The optimizer's own moves where they can run: a CPU rank whose step is held by its
optimizer gets fused=True; a fused optimizer that cannot run for this run (its class has
no fused kernel, or DTensor has none for it: config/engine_notes.py) is said under "not
proposed" where its share would have earned it. The FSDP2 host-wait moves on a GPU are
host_rules.host_fsdp's. Pure: the run's tables in, Suggestions out."""
from __future__ import annotations

import math

from nbtools.analysis.advice.diagnosis import diagnose, worst
from nbtools.analysis.advice.host_rules import CAUSE_SHARE, fsdp_training, trains
from nbtools.analysis.advice.suggestion import Suggestion, ab_cost
from nbtools.config.engine_notes import fused_line, fused_refusal

CPU_OPTIMIZER_SHARE = 0.15
"""A CPU rank's optimizer share of its own work (its step less its waits in hooks and
collectives) worth a fused optimizer's A/B: about the most fusing can save."""


def cpu_optimizer(run) -> list[Suggestion]:
    """A CPU rank's training step that spends at least CPU_OPTIMIZER_SHARE of its own work
    in the optimizer, which runs as-built or foreach: fused=True (torch's fused CPU kernels
    for Adam, AdamW, SGD and Adagrad). Score: that share."""
    cfg = run.config
    if cfg is None or cfg.optimizer_impl not in ("as-built", "foreach") or not trains(run) \
            or fused_refusal(run, cfg.resolved_parallel):
        return []
    ds = [d for d in diagnose(run, cpu_split=True) if d.bound == "cpu" and d.cpu_steps]
    shares = [(s, d) for d in ds if (s := cpu_optimizer_share(d)) == s]
    if not shares:
        return []
    share, d = max(shares, key=lambda x: x[0])
    if share < CPU_OPTIMIZER_SHARE:
        return []
    whole, hooks = sum(d.host.values()), d.host.get("hooks", 0.0)
    return [Suggestion(
        rule="cpu-optimizer", title="Fuse the optimizer step (fused=True)",
        change={"optimizer_impl": "fused"},
        evidence=(f"rank {d.rank}: the optimizer step took {d.host['optimizer']:.3g} ms of "
                  f"the {whole - hooks:.3g} ms the rank worked in a {whole:.3g} ms profiled "
                  f"step on the CPU ({f'{100 * share:.0f} %'}; the rest waited in hooks and "
                  "collectives)" if hooks > 0 else
                  f"rank {d.rank}: the optimizer step took {d.host['optimizer']:.3g} ms of a "
                  f"{whole:.3g} ms profiled step on the CPU ({f'{100 * share:.0f} %'})"),
        why=("The default optimizer updates the parameters tensor by tensor, op by op; "
             "fused=True does the whole update in one vectorized loop per step (torch's "
             "fused CPU kernels), with fewer passes over the parameters and their state."),
        code=fused_line(run), cost=ab_cost(""), about="host:optimizer",
        score=min(1.0, share), ranks=tuple(x.rank for _, x in shares
                                           if x.host.get("optimizer", 0) > 0))]


def cpu_optimizer_share(d) -> float:
    """The optimizer's share of a CPU rank's own work: its profiled step less the time in
    hooks and collectives, which on gloo is mostly waiting for a peer (it grows with a
    loaded peer, not with this rank's optimizer). NaN: nothing left."""
    work = sum(d.host.values()) - d.host.get("hooks", 0.0)
    return d.host.get("optimizer", 0.0) / work if work > 0 else math.nan


def not_proposed(run) -> list:
    """[(move, why)]: a fused optimizer that cannot run here, where the optimizer's share
    would otherwise have earned it."""
    cfg = run.config
    refusal = fused_refusal(run, cfg.resolved_parallel) if cfg is not None else ""
    if refusal and cfg.optimizer_impl in ("as-built", "foreach") and trains(run) and \
            _worth_it(run):
        return [("optimizer_impl='fused'", refusal)]
    return []


def _worth_it(run) -> bool:
    """The optimizer holds enough of the step that a fused one would have been proposed:
    a host-bound FSDP2 step's host wait, or a CPU rank's own work."""
    host_bound = [d for d in diagnose(run) if d.bound == "host"]
    if host_bound and fsdp_training(run):
        d = worst(host_bound)
        ms = d.host.get("optimizer", 0.0)
        if d.share(ms) >= CAUSE_SHARE or ms >= 2 * CAUSE_SHARE * d.waits["host"] > 0:
            return True
    cpu = [d for d in diagnose(run, cpu_split=True) if d.bound == "cpu" and d.cpu_steps]
    return any(cpu_optimizer_share(d) >= CPU_OPTIMIZER_SHARE for d in cpu)


RULES = (cpu_optimizer,)
