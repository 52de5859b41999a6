"""lab.advise(run): what a run's own tables say to try, ranked. It starts from why the step
takes its time (diagnosis.py: the GPU's waits and where the host was), and each rule
(host_rules, optimizer_rules, compile_rules, comm_rules, gpu_rules, kernel_rules: what
the GPU computed) proposes the move that fits that reading
and none that does not. A rule whose fix is a StepConfig field proposes that change; advise
keeps it only where it is a valid config for this run (else the suggestion keeps its code
and says the field did not apply). Suggestions about the same thing whose fixes overlap are
merged; moves the lab has seen fail or lose for this workload are set aside with the reason.
A run with nothing wrong gets an empty list, and a run that cannot be read says why.
Advice is a hypothesis until an A/B proves it. Pure: no torch."""
from __future__ import annotations

import dataclasses

from nbtools.analysis.advice import (comm_rules, compile_rules, gpu_rules, host_rules,
                                     kernel_rules, optimizer_rules)
from nbtools.analysis.advice.diagnosis import Diagnosis, Why, diagnose  # noqa: F401
from nbtools.analysis.advice.suggestion import NOTHING, Suggestion, Suggestions  # noqa: F401
from nbtools.config.step_config import ConfigError

RULES = (host_rules.RULES + optimizer_rules.RULES + compile_rules.RULES + comm_rules.RULES
         + gpu_rules.RULES + kernel_rules.RULES)
# what recompiles, and so what a recompile-limit hit is a symptom of
_RECOMPILES = ("recompile-shapes", "module-int-guard", "global-state")


def valid_change(cfg, change: dict) -> str | None:
    """None when ``cfg.replace(**change)`` is a config this run's kind could run (the
    constructor's rules, and a built-in scenario's own), else ConfigError's text."""
    if cfg is None or not change:
        return None if not change else "the run has no config"
    try:
        new = cfg.replace(**change)
        if new.scenario != "custom":
            new.check_scenario()
    except ConfigError as e:
        return str(e)
    return None


# Rules that read what happens while graphs are compiled: a run that reused compiled
# state shows none of it, the run that compiled it does.
COMPILE_TIME = compile_rules.RULES + (gpu_rules.cudagraph_skips,)


def change_key(s) -> tuple:
    """What makes two suggestions the same move: their field changes and model patch."""
    return (tuple(sorted((k, repr(v)) for k, v in s.change.items())),
            tuple(sorted((k, repr(v)) for k, v in s.model_patch.items())))


def advise(run, compiled_by=None, seen=None) -> Suggestions:
    """Suggestions for this run, best first (by score: the share of the run's time at
    stake, as each rule measures it). ``compiled_by``: the run that compiled the graphs
    this run reused (Run.compiled_by): its compile-time findings (recompiles, guards, graph
    breaks, CUDA-graph skips) hold for this run too, and are added, saying where they were
    seen. ``seen``: {change_key: why} moves this lab already saw fail or lose for this
    workload from this config (lab.advise fills it): set aside, with the reason."""
    why_not = unreadable(run)
    if why_not:
        return Suggestions(unreadable=why_not)
    out = _apply(run, RULES)
    note = ""
    if compiled_by is not None and compiled_by.run_id != run.run_id:
        have = {s.rule for s in out}
        out += [dataclasses.replace(s, evidence=f"in run #{compiled_by.run_id}, which compiled "
                                    f"the graphs this run reused: {s.evidence}")
                for s in _apply(compiled_by, COMPILE_TIME) if s.rule not in have]
    elif run.compiled_by:
        note = (f"this run reused graphs compiled by run #{run.compiled_by}, which is not in "
                "this history: its recompiles, guards and graph breaks cannot be read here "
                "(run the config again with cache='fresh' on this lab to see them)")
    out = merge(out)
    skipped = []
    if seen:
        keep = []
        for s in out:
            why = seen.get(change_key(s)) if (s.change or s.model_patch) else None
            (skipped.append((s, why)) if why else keep.append(s))
        out = keep
    out.sort(key=lambda s: -s.score)
    return Suggestions((dataclasses.replace(s, rank=i + 1) for i, s in enumerate(out)),
                       not_proposed=(host_rules.not_proposed(run)
                                     + optimizer_rules.not_proposed(run)),
                       skipped=skipped, note=note)


def unreadable(run) -> str:
    """Why a run's tables cannot be advised on ('' when they can)."""
    if not run.ok:
        err = next((e for e in (run.errors or {}).values() if e), "")
        line = (str(err).strip().splitlines() or [""])[-1][:200]
        return (f"run #{run.run_id} failed ({line or run.status}): its tables are those of a "
                "step that did not finish. Fix the error and run it again, then advise that run")
    tables = (run.summary, run.steps, run.events, run.compile_events)
    if all(t is None or not len(t) for t in tables):
        return (f"run #{run.run_id} has no tables: they are gone (deleted from its folder?) "
                "or it never finished a step. Run the config again, then advise that run")
    # a saved run whose table file went (Run.load flags it "damaged: steps.parquet is
    # missing ..."): the rules would read nothing there and say "nothing shows a known problem"
    lost = [t for t in _RULE_TABLES if any(str(f).startswith(f"damaged: {t}.parquet ")
                                           for f in run.flags or ())]
    if lost:
        return (f"run #{run.run_id} lost its {', '.join(lost)} table(s) (missing or unreadable "
                "in its folder): the rules read them, so no advice is honest without them. "
                "Run the config again, then advise that run")
    return ""


_RULE_TABLES = ("steps", "events", "compile_events", "summary")


def merge(out: list) -> list:
    """One suggestion per move: suggestions with the same change or model patch become the
    higher-scored one with the other's evidence added; a recompile-limit hit folds into the
    suggestion that removes the recompiles of that frame (its fix removes the hit)."""
    by_key: dict = {}
    kept = []
    for s in sorted(out, key=lambda s: -s.score):
        k = change_key(s)
        if (s.change or s.model_patch) and k in by_key:
            i = by_key[k]
            kept[i] = dataclasses.replace(
                kept[i], evidence=f"{kept[i].evidence}; also ({s.rule}): {s.evidence}",
                ranks=tuple(sorted(set(kept[i].ranks) | set(s.ranks))))
            continue
        if s.change or s.model_patch:
            by_key[k] = len(kept)
        kept.append(s)
    limits = [s for s in kept if s.rule == "recompile-limit"]
    for lim in limits:
        causes = [s for s in kept if s.rule in _RECOMPILES]
        same = [s for s in causes if s.about and s.about == lim.about] or \
            (causes if len(causes) == 1 else [])
        if not same:
            continue
        target = max(same, key=lambda s: s.score)
        i = kept.index(target)
        extra = "" if "recompile limit" in target.evidence else (
            "; and that frame hit the recompile limit: " + lim.evidence)
        kept[i] = dataclasses.replace(target, evidence=target.evidence + extra,
                                      score=max(target.score, lim.score))
        kept.remove(lim)
    return kept


def _apply(run, rules) -> list:
    out = []
    for rule in rules:
        for s in rule(run):
            bad = valid_change(run.config, s.change)
            if bad:
                s = dataclasses.replace(s, change={}, evidence=s.evidence + (
                    f" (the field change {s.change} does not apply to this config: {bad})"))
            out.append(s)
    return out
