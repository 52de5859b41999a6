"""lab.advise(run): what a run's own tables say to try, ranked. Each rule (compile_rules,
comm_rules, gpu_rules) reads measured signals: compile events and their guards, the engines' compile
outcome, the summary's communication columns. A rule whose fix is a StepConfig field
proposes that change; advise keeps it only where it is a valid config for this run (else
the suggestion keeps its code and says the field did not apply). A run with nothing wrong
gets an empty list. Advice is a hypothesis until an A/B proves it. Pure: no torch."""
from __future__ import annotations

import dataclasses

from nbtools.analysis.advice import comm_rules, compile_rules, gpu_rules
from nbtools.analysis.advice.suggestion import NOTHING, Suggestion, Suggestions  # noqa: F401
from nbtools.config.step_config import ConfigError

RULES = compile_rules.RULES + comm_rules.RULES + gpu_rules.RULES


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


def advise(run, compiled_by=None) -> Suggestions:
    """Suggestions for this run, best first (by score: the share of the run's time at
    stake, as each rule measures it). Empty for a failed run's missing tables, or a run
    with nothing wrong. ``compiled_by``: the run that compiled the graphs this run reused
    (Run.compiled_by): its compile-time findings (recompiles, guards, graph breaks,
    CUDA-graph skips) hold for this run too, and are added, saying where they were seen."""
    out = _apply(run, RULES)
    if compiled_by is not None and compiled_by.run_id != run.run_id:
        have = {s.rule for s in out}
        out += [dataclasses.replace(s, evidence=f"in run #{compiled_by.run_id}, which compiled "
                                    f"the graphs this run reused: {s.evidence}")
                for s in _apply(compiled_by, COMPILE_TIME) if s.rule not in have]
    out.sort(key=lambda s: -s.score)
    return Suggestions(dataclasses.replace(s, rank=i + 1) for i, s in enumerate(out))


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
