"""lab.explore's plan: the moves it queued (Exploration.planned), what an interrupted or
stopped exploration had not reached (rows that say so, not lost: a Ctrl-C in the first
screen returned no rows and "the start run's advice found nothing" while the advice held
two moves, issue 51), and its second pass. When the advice's queue is done and budget is
left, the moves left untried (priced over budget before its prices were measured, or gone
from the advice after a keep) are priced again and tried where they fit; then the moves
whose screens each read faster but that were not kept alone are tried together, once. So
an exploration does not end with its budget unspent while a move that fits is untried."""
from __future__ import annotations

import math

from nbtools.analysis.advice.suggestion import Suggestion
from nbtools.config.step_config import ConfigError
from nbtools.lab import price
from nbtools.results.exploration import (GONE, KEPT, NOT_REACHED, OVER_BUDGET, new_row)

TOGETHER = "together"
"""The rule name of a combined move (the moves that each read faster alone)."""
_NOT_TOGETHER = ("failed", "dropped", "resolved worse", "not valid", "stopped", "interrupted")


def move_key(s, change) -> tuple:
    """What a move is known by in the plan: its rule and its row's change text."""
    r = new_row(s, change, _patch(s, change))
    return r["rule"], r["change"]


def _patch(s, change) -> dict:
    return dict(s.model_patch) if s is not None and not change else {}


class Plan:
    """lab.explore's plan, a collaborator of its explorer given what it reads: the
    exploration ``ex`` (its rows, best config, planned moves), the prices (what an untried
    move would cost), the budget (whether a second pass has time) and ``seen`` (the moves
    listed so far, shared with the explorer's queue)."""

    def __init__(self, ex, prices, budget, seen: set):
        self.ex, self.prices, self.budget, self.seen = ex, prices, budget, seen
        self.moves: dict = {}       # move key -> (suggestion, change)
        self.open: dict = {}        # planned moves without an outcome -> their row or None
        self.retried: set = set()   # moves the second pass took up again
        self.gains: dict = {}       # move key -> what its screen read, as times better
        self.together_done = False

    def record(self, queue) -> None:
        """Record the moves of ``queue`` as planned (and not reached yet)."""
        for s, change in queue:
            k = move_key(s, change)
            self.moves[k] = (s, change)
            self.open[k] = None
            if k[1] not in self.ex.planned:
                self.ex.planned.append(k[1])

    def opened(self, row: dict) -> None:
        """A planned move's row now exists (its checks passed; screen and proof to come)."""
        k = (row["rule"], row["change"])
        if k in self.open:
            self.open[k] = row

    def closed(self, row: dict) -> None:
        """A planned move's row has its outcome: it is no longer open."""
        self.open.pop((row["rule"], row["change"]), None)

    def not_reached(self, how: str) -> list:
        """[(row, outcome)] of every planned move without an outcome, as not reached
        (``how``: interrupted or stopped), with what its screen would cost: for the
        explorer's table."""
        out = []
        for k, row in list(self.open.items()):
            s, change = self.moves[k]
            if row is None:
                row = new_row(s, change, _patch(s, change))
                row["cost_s"] = self.price_of(change)
            out.append((row, NOT_REACHED.format(how=how)))
        self.open.clear()
        return out

    def price_of(self, change) -> float:
        """The seconds a screen of ``change`` on the best config would cost (NaN: it cannot
        be priced, a model patch or a change that does not apply)."""
        ex = self.ex
        if not change:
            return math.nan
        try:
            cand = ex.best.replace(**change)
        except ConfigError:       # a change that no longer applies has no price
            return math.nan
        cost, _ = self.prices.screen_s(price.key(ex.best_workload, ex.best),
                                       price.key(ex.best_workload, cand))
        return cost

    def second_pass(self) -> list:
        """The queue of the second pass: each move left untried (over budget, gone after a
        keep) once more, its row replaced by what it does now; then the together move."""
        if self.budget.left() <= 0:
            return []
        out = []
        for r in list(self.ex.rows):
            k = (r["rule"], r["change"])
            if k in self.retried or k not in self.moves or \
                    not str(r["outcome"]).startswith((OVER_BUDGET, GONE)):
                continue
            self.retried.add(k)
            self.ex.rows.remove(r)
            out.append(self.moves[k])
        if not out:
            out = self.together()
        self.record(out)
        return out

    def together(self) -> list:
        """[(a "together" Suggestion, merged change)] of the field changes whose screens each read faster and
        that were not kept alone (their gains may add up where neither resolved), the
        best-screened first and no field twice; [] when fewer than two, or done before."""
        if self.together_done:
            return []
        self.together_done = True
        rows = [r for r in self.ex.rows if r.get("screen") and r["outcome"] != KEPT
                and not str(r["outcome"]).startswith(_NOT_TOGETHER)
                and self.gains.get((r["rule"], r["change"]), 0) > 1]
        rows.sort(key=lambda r: -self.gains[(r["rule"], r["change"])])
        merged, parts = {}, []
        for r in rows:
            s, change = self.moves.get((r["rule"], r["change"]), (None, None))
            if not change or any(f in merged for f in change):
                continue
            merged.update(change)
            parts.append(r["change"])
        if len(parts) < 2 or not new_move(merged, self.seen):
            return []
        s = Suggestion(rule=TOGETHER, title="the moves that each read faster, together",
                       change=dict(merged), evidence="screens: " + "; ".join(parts),
                       why="each alone read faster but was not kept: together the gains may "
                       "resolve", code="", cost="one screen and one proof")
        return [(s, dict(merged))]


def untried(advice, seen: set) -> list:
    """[(suggestion, change)] of ``advice`` not listed before (``seen``: the keys of what
    was, updated): a field change or model patch once each, and a fix in the person's own
    code once per rule, not again after each kept change re-advises."""
    out = []
    for s in advice:
        if s.model_patch and not s.change:
            key = {f"model.{k}": v for k, v in s.model_patch.items()}
        else:
            key = dict(s.change) or {f"(in your code) {s.rule}": s.title}
        if new_move(key, seen):
            out.append((s, dict(s.change)))
    return out


def new_move(change: dict, seen: set) -> bool:
    """True the first time ``change`` is seen (and from then on it is)."""
    k = tuple(sorted((f, repr(v)) for f, v in change.items()))
    if k in seen:
        return False
    seen.add(k)
    return True


def same(s) -> tuple:
    """What makes two runs' suggestions the same one."""
    return s.rule, repr(sorted(s.change.items())), repr(sorted(s.model_patch.items()))
