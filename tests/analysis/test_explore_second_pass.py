"""lab.explore's second pass (lab/explore_plan.py), on its own: when the queue is done and
budget is left, the moves left untried (over budget, gone after a keep) are queued once
more, their old rows replaced; then the field changes whose screens each read faster but
that were not kept are queued together once (the best-screened first, no field twice); then
nothing, so the loop ends. Before issue 51 an exploration ended with these untried and most
of its budget left."""
from __future__ import annotations

from nbtools import StepConfig
from nbtools.analysis.advice.suggestion import Suggestion
from nbtools.lab.ab_options import ABOptions
from nbtools.lab.explore import _Explorer
from nbtools.lab.explore_budget import Budget
from nbtools.lab.explore_plan import TOGETHER
from nbtools.results.exploration import (DROPPED, GONE, NOT_FASTER, OVER_BUDGET, Exploration,
                                         new_row)

START = StepConfig(scenario="custom", warmup=1, steps=2, profiled=1)


def sug(rule, change):
    return Suggestion(rule=rule, title=rule, change=change, evidence="", why="", code="",
                      cost="")


def test_moves_left_untried_are_taken_up_again_then_the_faster_ones_together():
    ex = Exploration(start=START, best=START, budget_s=600)
    x = _Explorer(None, ex, ABOptions(rounds=2), Budget(600))
    moves = [sug("a", {"compile": "default"}), sug("b", {"optimizer_impl": "fused"}),
             sug("c", {"autocast": "bf16"}), sug("d", {"compile": "max-autotune"}),
             sug("e", {"seed": 3}), sug("f", {"warmup": 2})]
    queue = [(s, dict(s.change)) for s in moves]
    x.plan.record(queue)
    outcomes = {"a": NOT_FASTER, "b": NOT_FASTER, "c": DROPPED + ": B/A 2", "d": NOT_FASTER,
                "e": OVER_BUDGET + ": its screen round ~99 s", "f": GONE + " compile='default'"}
    gains = {"a": 1.2, "b": 1.1, "c": 1.5, "d": 1.05, "e": 0, "f": 0}
    for s, change in queue:
        row = new_row(s, change, {})
        row["screen"] = "B/A ..." if gains[s.rule] else ""
        x.plan.gains[(s.rule, row["change"])] = gains[s.rule]
        x.add(row, outcomes[s.rule])
    assert ex.planned == [r["change"] for r in ex.rows] and not x.plan.open
    again = x.plan.second_pass()
    assert [s.rule for s, _ in again] == ["e", "f"]          # over budget, gone: again
    assert [r["change"] for r in ex.rows] == ["compile='default'", "optimizer_impl='fused'",
                                              "autocast='bf16'", "compile='max-autotune'"]
    for s, change in again:            # their second try: the screen found them no faster
        x.add(new_row(s, change, {}), NOT_FASTER)
    together = x.plan.second_pass()
    assert len(together) == 1
    s, change = together[0]
    # a and b read faster alone and were not kept; c was dropped, d's field is a's
    assert s.rule == TOGETHER and change == {"compile": "default", "optimizer_impl": "fused"}
    assert "compile='default', optimizer_impl='fused'" in ex.planned
    x.add(new_row(s, change, {}), NOT_FASTER)
    assert x.plan.second_pass() == []                             # once: the loop ends
