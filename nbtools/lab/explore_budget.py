"""lab.explore's budget: the wall seconds it may spend, made and checked once by explore and
handed to whatever spends it (the explorer, its A/B runner, the stop each A/B checks, the
last A/B). What a screen or a run costs is lab/price.py's; whether it fits is this. The
Exploration records what was asked (``budget_s``) as an output: nothing reads the deadline
back from it."""
from __future__ import annotations

import math
import time
from typing import Callable

from nbtools.config.step_config import ConfigError


def check_budget(budget_s) -> float:
    """The budget in wall seconds (None: no limit, inf), or ConfigError naming it."""
    if budget_s is None:
        return math.inf
    if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or \
            not budget_s > 0 or budget_s != budget_s:
        raise ConfigError(f"budget_s={budget_s!r}: give the wall seconds the exploration may "
                          "take, a number > 0 (e.g. 600), or None for no limit")
    return float(budget_s)


class Budget:
    """``seconds`` of wall time from now (``clock``: time.perf_counter), checked.

    Example:
        >>> b = Budget(600)
        >>> b.fits(42.0), b.left()
    """

    def __init__(self, seconds, clock: Callable[[], float] = time.perf_counter):
        self.seconds = check_budget(seconds)
        self._clock = clock
        self.t0 = clock()
        self.deadline = self.t0 + self.seconds
        self.uncharged_s = 0.0

    def left(self) -> float:
        """Seconds until the deadline (negative once past it)."""
        return self.deadline - self._clock()

    def fits(self, cost: float) -> bool:
        """Whether ``cost`` seconds, started now, end by the deadline (an unpriced NaN cost
        is not refused: nothing says it does not fit)."""
        return not cost > self.left()

    def spent(self) -> float:
        """Wall seconds since the budget started."""
        return self._clock() - self.t0

    def uncharge(self, seconds: float) -> None:
        """Leave ``seconds`` already spent out of the budget: a cold start run's one-time part
        (the engines' first run, the model's build, its compile) is no price of the
        exploration's moves (issue 51), so the deadline moves by it."""
        seconds = max(float(seconds), 0.0)
        self.uncharged_s += seconds
        self.deadline += seconds
