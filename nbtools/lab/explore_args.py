"""lab.explore's own arguments, checked before its first run: what it explores and from
where, the changes to try beside the advice. (Its budget is lab/explore_budget.py's Budget;
lab.ab's options, which explore passes on, are lab/ab_options.py's ABOptions.)"""
from __future__ import annotations

from nbtools.config.step_config import ConfigError, StepConfig, checked_changes
from nbtools.config.workload import Workload


def target_and_start(target, start) -> tuple:
    """(the Workload or step, or None; the start config)."""
    if isinstance(target, StepConfig):
        if start is not None and start != target:
            raise ConfigError("lab.explore(cfg, start=...): with a StepConfig as the target, "
                              "it is the start; give one of them")
        return None, target
    if isinstance(target, Workload) or callable(target):
        if start is None:
            return target, StepConfig(scenario="custom")
        if isinstance(start, dict):
            fields = dict(start)
            if fields.pop("scenario", "custom") != "custom":
                raise ConfigError(f"lab.explore(..., start={start!r}): your own model or step "
                                  "runs as scenario='custom'; leave scenario out of start (to "
                                  "explore a built-in scenario, pass its StepConfig as the "
                                  "target)")
            return target, StepConfig(scenario="custom", **fields)
        if isinstance(start, StepConfig):
            return target, start if start.scenario == "custom" else start.replace(scenario="custom")
        raise ConfigError(f"lab.explore(..., start={start!r}): give a StepConfig or a dict of "
                          "its fields (None: the defaults)")
    raise ConfigError(f"lab.explore({type(target).__name__}): give a Workload, your step "
                      "function, or a StepConfig of a built-in scenario")


def check_also(also) -> list:
    """The changes to try beside the advice: a dict or a list of dicts of StepConfig
    fields, each name and value checked before the first run (an unknown field or a bad
    value, ``{'compile': 'bogus'}`` or ``{'steps': -1}``, is a ConfigError naming it; how
    a change combines with the best config is checked when it is its turn: the best moves)."""
    if also is None:
        return []
    if isinstance(also, dict):
        also = [also]
    if not isinstance(also, (list, tuple)):
        raise ConfigError(f"also={also!r}: give a list of StepConfig field changes, e.g. "
                          "also=[{'compile': 'default'}]")
    out = []
    for c in also:
        if not isinstance(c, dict) or not c:
            raise ConfigError(f"also={also!r}: give a list of StepConfig field changes, e.g. "
                              "also=[{'compile': 'default'}]")
        out.append(checked_changes("lab.explore(also=...)", c))
    return out
