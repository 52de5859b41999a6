"""lab.explore: from a run's diagnosis and advice to A/Bs that prove or refute it, inside a
budget it keeps.

1. Run the start config once and advise it (lab.advise: the move that fits why the step
   takes its time, moves this lab saw fail set aside).
2. Screen: every candidate gets one short round of A B B A, unprofiled (a compile paid
   once on warm engines, priced first). One that is clearly worse there (both B runs beyond
   both A runs, by more than the round's own spread and the equivalence bound) is dropped
   with its numbers; the others are ranked by what the screen read.
3. Prove: the most promising first, in rounds (lab.ab, ``rounds`` or "auto") that start
   afresh (the screen's round is not reused: it chose the candidate, so it would bias the
   proof). Kept when B is resolved better; "no difference bigger than X %" and a resolved
   loss are remembered so the lab does not propose them again. After a keep the new best's
   run is advised again and the rest is screened against it: changes combine greedily.
4. The second pass (lab/explore_plan.py): when the queue is done and budget is left, the
   moves left untried (priced over budget, gone after a keep) are priced again and tried
   where they fit, then the moves that each read faster but were not kept are tried
   together once.
5. The budget: each screen and proof is priced before it starts from warm runs measured
   on this lab plus a compile estimate (lab/price.py), never from a cold start run: when
   the start run was cold (a rank built its state), one warm run of it is measured, and
   the cold start's one-time part is not charged. Inside an A/B a run that would end past
   the budget is not started. So the exploration ends within ``budget_s`` plus one run
   (plus that one-time part), and the table says what each step cost and what was left
   untried with what it would cost.

Every run stays in the history; a failing change is recorded and skipped; Ctrl-C or
``stop`` returns what finished and records the planned moves it did not reach."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from nbtools.analysis.advice import valid_change
from nbtools.analysis.verdict import EQUIVALENCE, bound_text
from nbtools.config.step_config import ConfigError
from nbtools.config.workload import Workload, with_model_patch
from nbtools.lab import price, tried
from nbtools.lab.ab_options import FIRST_LOOK, ABOptions
from nbtools.lab.explore_args import check_also, target_and_start
from nbtools.lab.explore_budget import Budget, check_budget
from nbtools.lab.explore_plan import Plan, new_move, same, untried
from nbtools.lab.explore_runs import (Null, Runs, check_side, clearly_worse, failed_run,
                                      last_error_line, gain, screen_text, side, sure_gain)
from nbtools.lab.keep_going import run_or_keep
from nbtools.lab.explore_overall import overall
from nbtools.lab.live_line import LiveLine
from nbtools.lab.numerics_check import changes_numbers, check_numbers
from nbtools.results.exploration import (DIVERGES, DROPPED, EQUIVALENT, GONE, IN_YOUR_CODE, KEPT,
                                         NOT_FASTER, OVER_BUDGET, SLOWER, Exploration,
                                         new_row)

MIN_WARMUP = 3
"""Warm-up steps an A/B that turns a compile on gives both sides: the first call compiles,
the second new shape recompiles (automatic dynamic), then the steps are steady."""


def explore(lab, target, start=None, budget_s: float = 600, rounds=5, *, max_rounds: int = 12,
            width: Optional[float] = None, also=(), timeout=None,
            on_step: Optional[Callable[[dict], None]] = None,
            on_run: Optional[Callable[[dict], None]] = None, stop=None,
            equivalence: Optional[float] = EQUIVALENCE, screen: bool = True) -> Exploration:
    """Lab.explore: run ``start`` once, advise it, screen each suggestion that changes a
    field (or carries a model patch) with one A B B A round, and prove the promising ones
    in order as A/Bs (lab.ab: ``rounds`` of A B B A, "auto" allowed) of the best so far
    against best + change; keep one when B is resolved better and re-advise the new best's
    run (changes combine greedily). ``target``: a Workload, a step function (``start``:
    its StepConfig or a dict of fields) or a StepConfig. ``budget_s``: wall seconds; each
    screen and proof is priced before it starts (warm runs measured here plus a compile
    estimate) and skipped as over budget when it does not fit, and no run starts that would
    end past it. ``equivalence``: the difference that does not matter (0.02: "no
    difference bigger than 2 %" ends an A/B and the change is not kept). ``screen=False``:
    no screen round, straight to the proof. ``also=[{fields}]``: changes to try beside the
    advice; ``on_step(row)`` per row of the table; ``on_run``, ``stop``, ``timeout``,
    ``max_rounds``, ``width`` as in lab.ab. Every argument is checked before the first
    run. Every run stays in the history; a failing change is recorded and skipped; Ctrl-C
    returns what finished."""
    fn, start = target_and_start(target, start)
    budget_s = check_budget(budget_s)
    extra = check_also(also)
    opts = ABOptions(rounds=rounds, max_rounds=max_rounds, width=width, timeout=timeout,
                     on_run=on_run, stop=stop, equivalence=equivalence)
    if on_step is not None and not callable(on_step):
        raise ConfigError(f"on_step={on_step!r}: give a function called with each row of "
                          "the table (or leave it out)")
    if not isinstance(screen, bool):
        raise ConfigError(f"screen={screen!r}: True (one short round per candidate first) "
                          "or False")
    lab.check(fn, start) if fn is not None else lab.check(start)   # ConfigError before a run
    # the clock starts after the checks; ex's budget_s and equivalence are outputs only
    budget = Budget(budget_s)
    ex = Exploration(start=start, best=start, workload=fn, best_workload=fn,
                     budget_s=budget.seconds, equivalence=opts.equivalence)
    x = _Explorer(lab, ex, opts, budget, on_step=on_step, screen=screen,
                  line=None if on_step is not None else LiveLine(lab))
    try:
        with (x.line or Null()):
            first = x.start_run()
            if first is not None:
                x.loop(first, extra)
                overall(lab, ex, opts, x.prices, budget, x.say)
    except KeyboardInterrupt:
        ex.note = ex.note or (f"interrupted (Ctrl-C) after {ex.ab_count} A/B(s): what "
                              "finished is kept")
        if ex.start_run is not None and not ex.advice:    # Ctrl-C before the first screen
            x.plan.record(x.suggested(x.lab.advise(ex.start_run)) + [(None, c) for c in extra])
    if ex.note:
        for row, outcome in x.plan.not_reached(
                "interrupted" if ex.note.startswith("interrupted") else "stopped"):
            x.add(row, outcome)
    ex.elapsed_s = budget.spent()
    getattr(lab, "explorations", []).append(ex)   # the panel's Export holds them
    return ex          # the caller shows it (its repr and HTML carry the verdict)


@dataclass
class _Candidate:
    s: object             # the Suggestion (None: an ``also`` change)
    change: dict
    patch: dict
    row: dict
    a: object = None      # the sides as lab.ab takes them
    b: object = None
    ka: tuple = ()
    kb: tuple = ()
    gain: float = 1.0     # the screen's B over A as "times better" (1: not screened)
    sure: float = 1.0     # the same in the round's least favourable pairing (the order)
    metric: str = "step_ms"
    extra: dict = field(default_factory=dict)


class _Explorer:
    """The screens and proofs of one exploration ``ex``: ``opts`` (the person's A/B options),
    ``budget`` (explore's), ``on_step`` (called with each row), ``screen`` (a short round per
    candidate first), ``line`` (the live line, or None). Its collaborators, each given what
    it reads: the prices (price.py), the plan (explore_plan.py), the A/B runner (explore_runs)."""

    def __init__(self, lab, ex, opts: ABOptions, budget: Budget, *, on_step=None,
                 screen: bool = True, line=None):
        self.lab, self.ex, self.opts, self.budget = lab, ex, opts, budget
        self.on_step, self.screen_on, self.line = on_step, screen, line
        self.prices = price.Prices()
        self.seen: set = set()
        self.plan = Plan(ex, self.prices, budget, self.seen)
        self.runs = Runs(lab, ex, opts, self.prices, budget, self.add, line)

    def say(self, text: str) -> None:
        if self.line:
            self.line.say(text)

    # -- the start ----------------------------------------------------------------------
    def start_run(self):
        ex, fn = self.ex, self.ex.workload
        self.say(f"explore: running the start config ({ex.start.label()})")
        t = time.perf_counter()
        checked = self.lab.check(fn, ex.start) if fn is not None else self.lab.check(ex.start)
        first = run_or_keep(self.lab, checked, timeout=self.opts.timeout)
        self.prices.record(price.key(fn, ex.start), time.perf_counter() - t, first)
        ex.start_s = time.perf_counter() - t
        if not first.ok:
            from nbtools.results.errors import RunFailed
            raise RunFailed(f"explore: the start config failed, nothing to advise: "
                            f"{last_error_line(first)}", first)
        ex.start_run = first
        if any(not r.get("reused") for r in (first.ranks or {}).values()):
            # a cold start (engines' first run, the model built, compiled) is no price of
            # the runs after it (issue 51: 5.2 s cold, 0.09 s warm; every screen priced 21 s)
            self.say(f"explore: the start run was cold ({ex.start_s:.1f} s): one warm run "
                     "to price the screens from")
            t = time.perf_counter()
            warm = run_or_keep(self.lab, checked, timeout=self.opts.timeout)
            ex.start_warm_s = time.perf_counter() - t
            if warm.ok:
                self.prices.record(price.key(fn, ex.start), ex.start_warm_s, warm)
                self.budget.uncharge(ex.start_s - ex.start_warm_s)
                ex.uncharged_s = self.budget.uncharged_s
        return first

    # -- the loop -----------------------------------------------------------------------
    def loop(self, first, extra) -> None:
        advice = self.advise(first)
        queue = self.suggested(advice) + [(None, c) for c in extra if self.new(c)]
        while queue:
            self.plan.record(queue)
            promising = self.screen_all(queue)
            if self.ex.note:
                return
            promising.sort(key=lambda c: (-c.sure, -c.gain))
            queue = []
            for i, cand in enumerate(promising):
                kept = self.prove(cand, len(promising) - i)
                if self.ex.note:
                    return
                if kept is not None:
                    advice = self.advise(kept.b)
                    queue = self.suggested(advice) + self.still_shown(
                        advice, promising[i + 1:], cand.row["change"])
                    break
            if not queue:
                queue = self.plan.second_pass()

    def advise(self, run):
        """lab.advise: a run on warm engines reused its graphs, and lab.advise adds the
        findings of the run that compiled them, and sets aside what this lab saw fail."""
        advice = self.lab.advise(run)
        self.ex.advice.append(advice)
        for s, why in getattr(advice, "skipped", ()):
            patch = dict(s.model_patch) if not s.change else {}
            if self.new(dict(s.change) or {f"model.{k}": v for k, v in patch.items()}):
                self.add(new_row(s, dict(s.change), patch), f"not tried again: {why}")
        return advice

    def suggested(self, advice) -> list:
        return untried(advice, self.seen)

    def new(self, change: dict) -> bool:
        return new_move(change, self.seen)

    def still_shown(self, advice, rest: list, kept: str) -> list:
        """The candidates not proven yet that the new best's advice still has (and the
        ``also`` changes); the others went with the kept change and are recorded so."""
        now = {same(s) for s in advice}
        out = []
        for c in rest:
            if c.s is None or same(c.s) in now:
                out.append((c.s, c.change))
            else:
                self.add(new_row(c.s, c.change, c.patch), f"{GONE} {kept}")
        return out

    # -- one candidate's checks ---------------------------------------------------------
    def candidate(self, s, change) -> Optional[_Candidate]:
        ex = self.ex
        # a fix in the person's code is tried on their model when the suggestion says how
        # (a model patch such as HF's config.use_cache); otherwise it is theirs to make
        patch = dict(s.model_patch) if s is not None and not change else {}
        row = new_row(s, change, patch)
        self.plan.opened(row)
        if not change and not patch:
            return self.add(row, IN_YOUR_CODE)
        if patch and not isinstance(ex.best_workload, Workload):
            return self.add(row, IN_YOUR_CODE + " (a step function's model is out of the "
                            "lab's reach)")
        bad = valid_change(ex.best, change)
        if bad:
            return self.add(row, f"not valid: {bad}")
        cand = ex.best.replace(**change)
        if cand == ex.best and not patch:
            return self.add(row, "already in the best config")
        wl = with_model_patch(ex.best_workload, patch) if patch else ex.best_workload
        base, kept_as = ex.best, cand
        if price.compiles_differently(cand, base) and cand.warmup < MIN_WARMUP:
            # automatic dynamic shapes recompile at the second new shape: with fewer warm-up
            # steps the compiles land in B's measured steps and the A/B times them
            row["note"] = (f"warm-up {MIN_WARMUP} on both sides (was {cand.warmup}): the "
                           "compiles belong before the measured steps")
            base, cand = base.replace(warmup=MIN_WARMUP), cand.replace(warmup=MIN_WARMUP)
        try:
            a, b = side(ex.best_workload, base), side(wl, cand)
            check_side(self.lab, a)
            check_side(self.lab, b)
        except ConfigError as e:
            return self.add(row, f"not valid: {e}")
        metric = s.metric if s is not None else "step_ms"
        row["metric"] = metric
        return _Candidate(s, change, patch, row, a, b, price.key(ex.best_workload, base),
                          price.key(wl, cand), metric=metric,
                          extra=dict(cfg=kept_as, workload=wl))

    # -- the screen ---------------------------------------------------------------------
    def screen_all(self, queue) -> list:
        out = []
        for s, change in queue:
            c = self.candidate(s, change)
            if c is None:
                continue
            if not self.screen_on:
                out.append(c)
                continue
            cost, how = self.prices.screen_s(c.ka, c.kb)
            c.row["cost_s"] = cost
            if not self.budget.fits(cost):
                self.add(c.row, f"{OVER_BUDGET}: its screen round ~{cost:.0f} s ({how}), "
                         f"{max(self.budget.left(), 0):.0f} s left")
                continue
            if self.stopped():
                return out
            cmp, t = self.runs.ab(c, rounds=1, screen=True)
            c.row["seconds"] += time.perf_counter() - t
            if self.ex.note:             # interrupted or stopped in its round
                return out
            if cmp is None:
                continue
            c.row["runs"] += len(cmp.runs_a or []) + len(cmp.runs_b or [])
            v = cmp.verdict
            c.row["screen"] = screen_text(cmp, c.metric)
            if not v.rounds:
                self.add(c.row, f"failed in the screen: {last_error_line(failed_run(cmp))}")
                continue
            c.gain, c.sure = gain(v.ratio, c.metric), sure_gain(cmp, c.metric)
            self.plan.gains[(c.row["rule"], c.row["change"])] = c.gain
            if clearly_worse(cmp, c.metric, self.opts.equivalence):
                tried.remember(self.lab, self.ex.best_workload, self.ex.best, c.s or c.change,
                               f"its screen round read {c.row['screen']}")
                self.add(c.row, f"{DROPPED}: {c.row['screen']}")
                continue
            out.append(c)
        return out

    # -- the proof ----------------------------------------------------------------------
    def prove(self, c: _Candidate, waiting: int = 1):
        """The A/B that decides ``c``; rounds="auto" gets at most its share of what is left
        (``waiting``: the promising candidates from this one on), so one unresolvable
        candidate does not spend the budget the others' proofs need."""
        per = self.prices.round_s(c.ka, c.kb)
        if not per:
            per, _ = self.prices.screen_s(c.ka, c.kb)
        auto = self.opts.auto
        need = FIRST_LOOK if auto else self.opts.rounds
        c.row["cost_s"] = per * need
        if not self.budget.fits(per * need):
            return self.add(c.row, f"{OVER_BUDGET}: the proof needs ~{per * need:.0f} s ("
                            f"{need} rounds of ~{per:.0f} s), {max(self.budget.left(), 0):.0f}"
                            " s left" + (f"; its screen read {c.row['screen']}"
                                      if c.row.get("screen") else ""))
        if self.stopped():
            return None
        most = self.opts.most
        if auto and per > 0:
            share = self.budget.left() / max(waiting, 1)
            most = max(FIRST_LOOK, min(most, int(share // per)))
        cmp, t = self.runs.ab(c, rounds=self.opts.rounds, max_rounds=most)
        c.row["seconds"] += time.perf_counter() - t
        if cmp is None:
            return None
        ex, v = self.ex, cmp.verdict
        ex.comparisons.append(cmp)
        c.row["runs"] += len(cmp.runs_a or []) + len(cmp.runs_b or [])
        c.row.update(ab=len(ex.comparisons) - 1, verdict=v.text, ratio=v.ratio, low=v.low,
                     high=v.high, resolved=v.resolved, rounds=v.rounds)
        failed = [r for r in list(cmp.runs_b or []) + list(cmp.runs_a or []) if not r.ok]
        if failed and not v.rounds:
            return self.add(c.row, f"failed: {last_error_line(failed[0])}")
        if v.good and changes_numbers(c.s, c.change):
            n = self.numerics(c)
            c.row["numerics"] = n.text
            if not n.ok:
                tried.remember(self.lab, ex.best_workload, ex.best, c.s or c.change,
                               f"its numbers diverge: {n.text}")
                self.add(c.row, f"{DIVERGES}: {n.text}")
                self.said(c, v)
                return None
        if v.good:
            ex.best, ex.best_workload = c.extra["cfg"], c.extra["workload"]
            ex.kept = ex.kept + [dict(c.change) if c.change else
                                 {f"model.{k}": x for k, x in c.patch.items()}]
            if c.patch:
                ex.patches = ex.patches + [(c.patch, c.s.code)]
            self.add(c.row, KEPT)
            self.said(c, v)
            return cmp
        outcome = (SLOWER if v.resolved else EQUIVALENT.format(bound=bound_text(v.bound))
                   if v.equivalent else NOT_FASTER)
        if self.runs.budget_hit:
            outcome += f" (the budget ended it after {v.rounds} round(s))"
        if v.resolved or v.equivalent:
            tried.remember(self.lab, ex.best_workload, ex.best, c.s or c.change,
                           f"an A/B read {v.text}")
        self.add(c.row, outcome + (f" ({len(failed)} run(s) failed)" if failed else ""))
        self.said(c, v)
        return None

    def numerics(self, c: _Candidate):
        self.say(f"explore: checking the numbers of {c.row['change']}")
        n, took, _ = check_numbers(self.lab, c.extra["workload"], c.extra["cfg"],
                                   self.opts.timeout)
        c.row["seconds"] += took
        c.row["runs"] += 1
        return n

    def said(self, c, v) -> None:
        if self.line:
            self.line.said(f"explore: {c.row['change']}: {v.text} -> {c.row['outcome']}")

    def stopped(self) -> bool:
        stop = self.opts.stop
        if stop is not None and stop.is_set():
            self.ex.note = f"stopped after {self.ex.ab_count} A/B(s)"
            return True
        return False

    def add(self, row: dict, outcome: str):
        row["outcome"], row["kept"] = outcome, outcome == KEPT
        self.plan.closed(row)
        self.ex.rows.append(row)
        if self.on_step is not None:
            self.on_step(dict(row))
        return None

