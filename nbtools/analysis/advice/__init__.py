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


def advise(run) -> Suggestions:
    """Suggestions for this run, best first (by score: the share of the run's time at
    stake, as each rule measures it). Empty for a failed run's missing tables, or a run
    with nothing wrong."""
    out = []
    for rule in RULES:
        for s in rule(run):
            bad = valid_change(run.config, s.change)
            if bad:
                s = dataclasses.replace(s, change={}, evidence=s.evidence + (
                    f" (the field change {s.change} does not apply to this config: {bad})"))
            out.append(s)
    out.sort(key=lambda s: -s.score)
    return Suggestions(dataclasses.replace(s, rank=i + 1) for i, s in enumerate(out))
