"""lab.explore's budget (lab/explore_budget.py): made and checked once by explore, handed to
what spends it (the plan's second pass, each A/B's stop), never read back from the
Exploration, which records budget_s for the person only (issue 53). The clock is a plain
function the test moves, so nothing here depends on the host's speed."""
from __future__ import annotations

import math

import pytest

from nbtools import StepConfig
from nbtools.analysis.advice.suggestion import Suggestion
from nbtools.config.step_config import ConfigError
from nbtools.lab import price
from nbtools.lab.ab_options import ABOptions
from nbtools.lab.explore import _Explorer
from nbtools.lab.explore_budget import Budget
from nbtools.lab.explore_runs import Ends
from nbtools.results.exploration import OVER_BUDGET, Exploration, new_row

START = StepConfig(scenario="custom", warmup=1, steps=2, profiled=1)


class Clock:
    """Seconds that move only when the test says."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_budget_says_what_is_left_and_what_fits_on_its_clock():
    clock = Clock()
    b = Budget(100, clock=clock)
    assert b.left() == 100 and b.spent() == 0 and b.fits(100) and not b.fits(100.5)
    clock.now += 30
    assert b.left() == 70 and b.spent() == 30 and b.fits(70) and not b.fits(71)
    b.uncharge(20)                   # a cold start's one-time part is not charged
    assert b.left() == 90 and b.uncharged_s == 20 and b.spent() == 30
    b.uncharge(-5)                   # a warm run slower than the cold one charges nothing
    assert b.uncharged_s == 20 and b.left() == 90
    clock.now += 200
    assert b.left() == -110 and not b.fits(0)
    assert b.fits(math.nan)          # an unpriced cost is not refused: nothing says it won't fit
    endless = Budget(None, clock=clock)
    assert endless.seconds == math.inf and endless.fits(1e12)


@pytest.mark.parametrize("bad", [0, -1, math.nan, "600", True])
def test_a_bad_budget_is_one_error_naming_it(bad):
    with pytest.raises(ConfigError, match=r"budget_s=.*give the wall seconds"):
        Budget(bad)


def test_an_ab_ends_before_a_run_that_would_end_past_the_budget():
    clock = Clock()
    prices, budget = price.Prices(), Budget(100, clock=clock)
    ka, kb = price.key(None, START), price.key(None, START.replace(compile="default"))
    prices.record(ka, 10.0)
    prices.record(kb, 50.0)
    ends = Ends(prices, budget, (ka, kb))
    assert not ends.is_set() and not ends.budget_ended
    clock.now += 55                  # 45 s left: B's 50-s run would end past the budget
    assert ends.is_set() and ends.budget_ended


def _sug(rule, change):
    return Suggestion(rule=rule, title=rule, change=change, evidence="", why="", code="",
                      cost="")


def test_the_explorer_steers_by_its_budget_not_by_the_explorations_budget_s():
    """The Exploration's budget_s is an output: set to 1 s (or changed under the explorer)
    it steers nothing; the Budget explore made does."""
    clock = Clock()
    budget = Budget(600, clock=clock)
    ex = Exploration(start=START, best=START, budget_s=1)
    x = _Explorer(None, ex, ABOptions(rounds=2), budget)
    s = _sug("a", {"compile": "default"})
    x.plan.record([(s, dict(s.change))])
    x.add(new_row(s, dict(s.change), {}), OVER_BUDGET + ": its screen round ~99 s")
    clock.now += 10                  # past ex.budget_s, well inside the budget
    ex.budget_s = 0.0
    assert [m for m, _ in x.plan.second_pass()] == [s]    # time left: taken up again
    x.add(new_row(s, dict(s.change), {}), OVER_BUDGET + ": its screen round ~99 s")
    x.plan.retried.clear()
    ex.budget_s = 1e9
    clock.now += 600                 # past the budget: nothing more, whatever ex says
    assert x.plan.second_pass() == []


def test_a_stop_set_before_the_start_against_best_ab_makes_no_run():
    # the panel's Stop reached every A/B of explore but its last: start against best ran
    # its rounds to the end (its options dropped the person's stop)
    import threading

    from nbtools.lab.explore_overall import overall
    best = START.replace(autocast="bf16", compile="default")
    rows = []
    for change in ({"autocast": "bf16"}, {"compile": "default"}):
        r = new_row(None, change, {})
        r.update(kept=True, outcome="kept")
        rows.append(r)
    ex = Exploration(start=START, best=best, rows=rows,
                     kept=[{"autocast": "bf16"}, {"compile": "default"}])
    prices = price.Prices()
    for cfg in (START, best):
        prices.record(price.key(None, cfg), 1.0)
    stop, said = threading.Event(), []
    stop.set()
    overall(None, ex, ABOptions(rounds=2, stop=stop), prices, Budget(600, clock=Clock()),
            said.append)
    assert getattr(ex, "overall", None) is None and said == []
    assert ex.overall_note == "start against best not measured: stopped before its A/B"
