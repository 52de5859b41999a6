"""lab.explore's A/Bs: running one (screen or proof) through lab.ab with the budget's stop,
each run's wall seconds recorded for the prices, a failing or stopped A/B said in the row
(Runs, a collaborator given the lab, the budget, the prices and the options it needs);
and what a screen round reads (its text, B over A as a gain, clearly worse or not)."""
from __future__ import annotations

import math
import time
from dataclasses import replace

from nbtools.analysis import metrics
from nbtools.analysis.verdict import EQUIVALENCE
from nbtools.common.units import fmt_ratio
from nbtools.config.workload import patch_text
from nbtools.lab import ab as ab_rounds
from nbtools.results.exploration import OVER_BUDGET, change_text


class Runs:
    """lab.explore's A/B runner. Given explicitly what it spends and records into: the lab,
    the exploration (its comparisons are counted, its ``note`` says an interruption), the
    person's A/B options (each A/B's are derived from them, not checked again), the prices
    each run's wall goes into, the budget no run may end past, ``add`` (the explorer's:
    a row and its outcome into the table) and the live line (or None)."""

    def __init__(self, lab, ex, opts, prices, budget, add, line=None):
        self.lab, self.ex, self.opts, self.prices, self.budget = lab, ex, opts, prices, budget
        self.add, self.line = add, line
        self.budget_hit = False
        """Whether the budget ended the last A/B (its next run would have ended past it)."""

    def ab(self, c, rounds, screen: bool = False, max_rounds=None):
        """lab.ab of c's sides (unprofiled for a screen), each run's wall recorded for the
        prices, a run that would end past the budget not started; (Comparison or None
        when it failed to start, the time it began)."""
        a, b = c.a, c.b
        if screen:
            a, b = unprofiled(a), unprofiled(b)
        self.budget_hit = False
        stop = self.opts.stop
        ends = Ends(self.prices, self.budget, (c.ka, c.kb), stop)
        what = change_text(c.change) if c.change else patch_text(c.patch)
        events = self.events(c, ends, what, screen)
        t = time.perf_counter()
        try:
            o = replace(self.opts, rounds=rounds, metric=c.metric, on_run=events, stop=ends,
                        max_rounds=max_rounds or self.opts.most,
                        equivalence=None if screen else self.opts.equivalence)
            cmp = ab_rounds.run_ab(self.lab, a, b, o)
        except KeyboardInterrupt:
            # before both sides ran: lab.ab had nothing to compare; the row says so
            c.row["runs"] += ends.runs
            c.row["seconds"] += time.perf_counter() - t
            self.ex.note = (f"interrupted (Ctrl-C) during the {'screen' if screen else 'A/B'}"
                            f" of {what}")
            self.add(c.row, f"interrupted: not kept ({ends.runs} run(s))")
            raise
        except Exception as e:  # noqa: BLE001 - a change that fails is recorded and skipped
            c.row["runs"] += ends.runs
            if stop is not None and stop.is_set() and ends.failed is None:
                self.add(c.row, f"stopped: not kept ({ends.runs} run(s))")
                self.ex.note = f"stopped during the A/B of {c.row['change']}"
            elif ends.budget_ended and ends.failed is None:
                # its next run would have ended past the budget before both sides ran
                self.add(c.row, f"{OVER_BUDGET}: the budget ran out after {ends.runs} of its "
                         "runs")
            else:
                self.add(c.row, f"failed: {type(e).__name__}: {one_line(e)}")
            return None, t
        if ends.failed is not None:
            c.row["runs"] += ends.runs
            self.add(c.row, f"failed: {last_error_line(ends.failed)}")
            return None, t
        self.budget_hit = ends.budget_ended
        if ends.budget_ended and not cmp.rounds:
            c.row["runs"] += ends.runs
            self.add(c.row, f"{OVER_BUDGET}: the budget ran out after {ends.runs} of its "
                     "runs, before a whole round")
            return None, t
        if cmp.note.startswith("interrupted") or (cmp.note.startswith("stopped")
                                                   and not ends.budget_ended):
            how = cmp.note.split(" after")[0]
            c.row["runs"] += ends.runs
            self.add(c.row, f"{how}: not kept ({cmp.verdict.rounds} round(s))")
            self.ex.note = f"{how} during the {'screen' if screen else 'A/B'} of " \
                           f"{c.row['change']}"
            return None, t
        return cmp, t

    def events(self, c, ends, what, screen):
        """lab.ab's on_run: each run's wall seconds into the prices, a failed B run ends
        the A/B, the event on to the caller's on_run and the live line."""
        began: dict = {}
        k = len(self.ex.comparisons) + 1
        on_run = self.opts.on_run

        def event(ev):
            if ev["phase"] == "start":
                began[ev["index"]] = time.perf_counter()
            else:
                ends.runs += 1
                if ev["index"] in began:
                    self.prices.record(c.ka if ev["side"] == "A" else c.kb,
                                       time.perf_counter() - began.pop(ev["index"]), ev["run"])
                if ev["side"] == "B" and not ev["run"].ok and ends.failed is None:
                    ends.failed = ev["run"]
            if on_run is not None:
                on_run(dict(ev, change=dict(c.change) or {"model": patch_text(c.patch)},
                            screen=screen))
            if self.line and ev["phase"] == "start":
                self.line.say(f"explore {'screen' if screen else f'A/B {k}'}: {what} · round "
                              f"{ev['round']} of {ev['rounds']} · {ev['side']} (run "
                              f"{ev['index']} of {ev['of']}) · {self.budget.left():.0f} s of "
                              "the budget left")
        return event


class Ends:
    """lab.ab's ``stop``: the caller's ``stop``, the first failed run of B (its other runs
    would fail too, or compare a broken config), or a next run that would end past the
    ``budget`` (the longest warm run of the A/B's configs, ``keys``, in ``prices``)."""

    def __init__(self, prices, budget, keys, stop=None):
        self.prices, self.budget, self.keys, self.stop = prices, budget, tuple(keys), stop
        self.failed, self.runs, self.budget_ended = None, 0, False

    def is_set(self) -> bool:
        """True once the A/B should end before its next run (lab.ab asks before each)."""
        if self.failed is not None or (self.stop is not None and self.stop.is_set()):
            return True
        if not self.budget.fits(self.prices.longest_run(*self.keys)):
            self.budget_ended = True
            return True
        return False


def screen_text(cmp, metric: str) -> str:
    """What one screen round read: B/A and each side's two runs."""
    va, vb = cmp.round_values(metric)
    unit = metrics.unit(metric)
    nums = lambda xs: ", ".join(f"{x:.3g}" for x in xs)  # noqa: E731
    v = cmp.verdict
    ratio = f"B/A {fmt_ratio(v.ratio)}" if v.ratio == v.ratio else "no ratio"
    if not va:
        return ratio
    return f"{ratio} in one round ({metric}: A {nums(va[0])} {unit}; B {nums(vb[0])} {unit})"


def gain(ratio: float, metric: str) -> float:
    """B over A as how many times better B is (>1: better)."""
    if not (ratio == ratio and ratio > 0):
        return 0.0
    return 1 / ratio if metrics.better(metric) != "higher" else ratio


def sure_gain(cmp, metric: str) -> float:
    """The screen round's B over A in its least favourable pairing, as times better: B's
    worse run against A's better one. Proofs go in this order: on a noisy host-bound step
    (1 x H200, a Llama under FSDP2) the best point reading was the noisiest (B 128, 102 ms
    against A 124, 140 ms), was proven first and left the budget short of a change whose
    every run was faster (B 114, 105 against A 124, 118)."""
    va, vb = cmp.round_values(metric)
    if not (va and vb and va[0] and vb[0]) or not all(x == x and x > 0 for x in va[0] + vb[0]):
        return 0.0
    a, b = va[0], vb[0]
    return min(a) / max(b) if metrics.better(metric) != "higher" else min(b) / max(a)


def clearly_worse(cmp, metric: str, bound) -> bool:
    """Both B runs worse than both A runs, by more than twice the round's own spread (the
    larger of the two sides' run-to-run difference) and more than the equivalence bound."""
    va, vb = cmp.round_values(metric)
    if not va or not vb or not all(x == x and x > 0 for x in va[0] + vb[0]):
        return False
    lower = metrics.better(metric) != "higher"
    a, b = va[0], vb[0]
    apart = min(b) > max(a) if lower else max(b) < min(a)
    spread = max(math.log(max(a) / min(a)), math.log(max(b) / min(b)))
    gap = abs(math.log(_geo(b) / _geo(a)))
    return apart and gap > max(2 * spread, math.log1p(EQUIVALENCE if bound is None else bound))


def _geo(xs) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def unprofiled(side):
    """A side (a config or a (workload, config) pair) with its profiled steps off."""
    if isinstance(side, tuple):
        return side[0], side[1].replace(profiled=0)
    return side.replace(profiled=0)


def last_error_line(run) -> str:
    """A failed run's last error line (its status when it has none), for a table cell: the
    words the exception ended with, where ``Run.first_error`` names the root cause."""
    msg = next((m for m in (run.errors or {}).values() if m), run.status)
    return (msg.strip().splitlines() or [run.status])[-1][:200]


def one_line(e) -> str:
    """An exception's first line, for a table cell."""
    return (str(e).strip().splitlines() or [""])[0][:200]


def check_side(lab, side):
    """lab.check of a side as lab.ab takes it (a config, or a (workload, config) pair)."""
    return lab.check(*side) if isinstance(side, tuple) else lab.check(side)


def side(fn, cfg):
    """A side as lab.ab takes it: the config, with its workload or step where there is one."""
    return (fn, cfg) if fn is not None else cfg


def failed_run(cmp):
    """The first failed run of an A/B (B's first), else its B."""
    runs = list(cmp.runs_b or []) + list(cmp.runs_a or [])
    return next((r for r in runs if not r.ok), cmp.b)


class Null:
    """A context that does nothing (no live line to hold)."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
