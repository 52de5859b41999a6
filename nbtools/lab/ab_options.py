"""lab.ab's options (and lab.explore's, which it passes on to each A/B it makes): one frozen
object, checked when it is made, so a bad value is one ConfigError naming the option and
what to give before the first run, not a TypeError minutes later; the explorer derives the
options of its screens and proofs from it (``dataclasses.replace``) instead of checking the
person's arguments again for every A/B. The equivalence bound's default is
analysis/verdict.py's EQUIVALENCE."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

from nbtools.analysis import metrics
from nbtools.analysis.verdict import EQUIVALENCE, check_bound
from nbtools.config.step_config import ConfigError
from nbtools.lab.arguments import check_seconds
from nbtools.lab.sweeps import check_rounds

FIRST_LOOK = 3      # rounds="auto" looks at the verdict after this round and each one after


@dataclass(frozen=True)
class ABOptions:
    """How an A/B runs and what its verdict judges (lab.ab's keywords)."""

    rounds: Union[int, str] = 5
    """Complete A B B A rounds to run, or "auto": as many as it takes, up to ``max_rounds``."""
    max_rounds: int = 12
    """The most rounds "auto" runs."""
    metric: str = "step_ms"
    """The summary metric the verdict judges (nbtools.analysis.metrics)."""
    width: Optional[float] = None
    """"auto" also stops once the interval is narrower than this (0.04: high / low < 1.04)."""
    equivalence: Optional[float] = EQUIVALENCE
    """The difference that does not matter (0.02: "no difference bigger than 2 %"); None:
    no bound."""
    timeout: Optional[float] = None
    """Seconds each run may take (None: the lab's)."""
    on_run: Optional[Callable[[dict], None]] = None
    """Called before and after every run with its event dict."""
    stop: object = None
    """An object with ``is_set()`` (threading.Event), checked before each run."""

    def __post_init__(self):
        auto = isinstance(self.rounds, str) and self.rounds == "auto"
        if isinstance(self.rounds, str) and not auto:
            raise ConfigError(f"rounds={self.rounds!r}: give a whole number of rounds (e.g. 5) "
                              "or 'auto' (as many as it takes, up to max_rounds)")
        most = check_rounds(self.max_rounds, "max_rounds")
        if auto and most < FIRST_LOOK:
            raise ConfigError(f"max_rounds={self.max_rounds}: rounds='auto' looks from round "
                              f"{FIRST_LOOK} on; give max_rounds >= {FIRST_LOOK}")
        w = self.width
        if w is not None and (isinstance(w, bool) or not isinstance(w, (int, float))
                              or not 0 < w < 10):
            raise ConfigError(f"width={w!r}: give the interval's relative width to stop "
                              "at, e.g. 0.04 (high / low below 1.04)")
        timeout = None if self.timeout is None else check_seconds("timeout", self.timeout)
        if self.on_run is not None and not callable(self.on_run):
            raise ConfigError(f"on_run={self.on_run!r}: give a function called with each "
                              "run's event dict (or leave it out)")
        if self.stop is not None and not callable(getattr(self.stop, "is_set", None)):
            raise ConfigError(f"stop={self.stop!r}: give an object with is_set(), such as a "
                              "threading.Event you set to stop (or leave it out)")
        try:
            bound = check_bound(self.equivalence)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        check_metric(self.metric)
        # frozen: the checked values replace what was given (a float bound, whole rounds)
        set_ = object.__setattr__
        set_(self, "rounds", "auto" if auto else check_rounds(self.rounds))
        set_(self, "max_rounds", most)
        set_(self, "equivalence", bound)
        set_(self, "timeout", timeout)

    @property
    def auto(self) -> bool:
        """rounds="auto": stop once the verdict is resolved (or equivalent, or narrow)."""
        return self.rounds == "auto"

    @property
    def most(self) -> int:
        """The most rounds these options run."""
        return self.max_rounds if self.auto else self.rounds


def check_metric(metric) -> None:
    """ConfigError unless ``metric`` names a summary number a verdict can judge."""
    if not isinstance(metric, str):
        raise ConfigError(f"metric={metric!r}: give one metric's name as a string, e.g. "
                          "metric='step_ms' (cmp.verdict_on(name) judges any other afterwards)")
    m = metrics.METRICS.get(metric)
    if m is None or not m.combine:
        known = ", ".join(n for n, v in metrics.METRICS.items() if v.better)
        raise ConfigError(f"metric={metric!r} is not a summary number; pick one of: {known}")
