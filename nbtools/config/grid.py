"""A sweep's configs: the cross product of fields' values over a base config, for the lab's
sweep and the CLI's ``run`` alike."""
from __future__ import annotations

import itertools

from nbtools.config.step_config import ConfigError, StepConfig


def grid(base: StepConfig, field_values: dict, check=None) -> list:
    """One (change, config) per combination of the fields' values, in the order given (the
    last field varies fastest); ``check(config)``, when given, replaces the config by what
    it returns (a lab's Lab.check). Where a combination is rejected, its ConfigError stands
    instead of the config: a notebook's sweep skips those, the CLI refuses the sweep."""
    names = list(field_values)
    out = []
    for combo in itertools.product(*(field_values[n] for n in names)):
        change = dict(zip(names, combo))
        try:
            cfg = base.replace(**change)
            out.append((change, check(cfg) if check is not None else cfg))
        except ConfigError as e:
            out.append((change, e))
    return out
