"""Exploration: what lab.explore tried, what each A/B said, and the winner. The table of
steps, the best config, the verdict that proves it (or the honest "nothing tried was
resolved faster"), and the winner's changes as code for a person's own script. Pure data:
the figure and the HTML come from nbtools.ui through results/views.py."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import pandas as pd

from nbtools.common.units import fmt_s
from nbtools.analysis.verdict import Verdict
from nbtools.config.step_config import StepConfig
from nbtools.config.workload import Workload
from nbtools.config.engine_notes import sharded_whole
from nbtools.config.script_code import script_code
from nbtools.results.views import view

COLUMNS = ("change", "rule", "metric", "screen", "verdict", "ratio", "low", "high", "resolved",
           "rounds", "runs", "seconds", "cost_s", "kept", "outcome", "numerics", "note")
KEPT = "kept"
NOT_FASTER = "not resolved faster"
SLOWER = "resolved worse: not kept"
EQUIVALENT = "no difference bigger than {bound}: not kept"
DROPPED = "dropped in the screen (clearly worse)"
OVER_BUDGET = "not tried for lack of budget"
IN_YOUR_CODE = "not tried: the fix is in your code (see the suggestion's code)"
GONE = "not tried: the new best's run no longer shows it, after keeping"
NOTHING = "nothing tried was resolved faster"
DIVERGES = "faster, but not kept: its numbers diverge"
NOT_REACHED = "not tried: {how} before its turn"
LEFT = (OVER_BUDGET, GONE, "not tried: interrupted", "not tried: stopped")
"""The outcomes of a move the exploration meant to try and did not (Exploration.left_untried)."""


def new_row(s, change: dict, patch: dict) -> dict:
    """A row of Exploration.steps before its screen and A/B (if any) fill it."""
    from nbtools.config.workload import patch_text
    return dict(change=change_text(change) if not patch else patch_text(patch),
                rule=s.rule if s else "also", metric=getattr(s, "metric", "step_ms"),
                screen="", verdict="", ratio=math.nan, low=math.nan, high=math.nan,
                resolved=False, rounds=0, runs=0, seconds=0.0, cost_s=math.nan, kept=False,
                ab=None, note="", numerics="")


def change_text(change: dict) -> str:
    """A change as a person writes it (``compile='default', dynamic=True``); an empty one is
    a fix in the person's code."""
    return ", ".join(f"{k}={v!r}" for k, v in change.items()) or "(in your code)"


@dataclass
class Exploration:
    """``start``: the config explored from; ``best``: the fastest config proven (start when
    nothing was); ``rows``: one dict per suggestion considered (COLUMNS), in the order
    tried; ``comparisons``: the Comparison of each A/B made (``rows[i]['ab']`` indexes it);
    ``kept``: the changes kept, in order; ``start_run``: the run that was advised first;
    ``note``: why it ended early (stopped, interrupted), else ''; ``workload``: the
    Workload or step explored (None: a built-in scenario); ``elapsed_s`` and ``budget_s``."""
    start: StepConfig
    best: StepConfig
    rows: list = field(default_factory=list)
    comparisons: list = field(default_factory=list)
    kept: list = field(default_factory=list)
    start_run: object = None
    note: str = ""
    workload: object = None
    best_workload: object = None
    """The Workload of the best config: ``workload`` with the model patches kept."""
    patches: list = field(default_factory=list)
    """The model patches kept (fixes in the person's code the lab tried for them): a list
    of (patch, the suggestion's code)."""
    budget_s: float = math.inf
    elapsed_s: float = 0.0
    metric: str = "step_ms"
    equivalence: Optional[float] = None
    """The equivalence bound its A/Bs used (0.02: a change within 2 % is not kept)."""
    start_s: float = 0.0
    """Wall seconds of the start run (a cold one pays its compile)."""
    advice: list = field(default_factory=list)
    """What lab.advise said of each run it advised (the start's first): Suggestions."""
    planned: list = field(default_factory=list)
    """Every move it queued to try (the advice's and ``also``'s), as change texts in the
    order planned; an interrupted or stopped exploration's rows say which it reached."""
    overall: object = None
    """With 2 or more changes kept: the Comparison of start against best (None: not made)."""
    overall_note: str = ""
    """Why that A/B was not made (its price over the budget left), else ''."""
    start_warm_s: float = math.nan
    """Wall seconds of the warm run of start measured after a cold start run (NaN: the
    start run was warm): what the screens were priced from."""
    uncharged_s: float = 0.0
    """The cold start run's one-time part (the engines' first run, the model's build, its
    compile: its wall less the warm run's) that any first run pays: not charged to the
    budget, said in budget_text."""

    @property
    def steps(self) -> pd.DataFrame:
        """One row per change considered: the change, the suggesting rule, the metric its
        A/B judged (step_ms, or items_per_s for a batch change), what its screen round read,
        the A/B's verdict text, ratio (B over A), its 95 % interval low-high, resolved,
        rounds, runs made (screen and proof), seconds they took, cost_s (what its screen or
        proof was priced at before it started, or would cost where it was left untried),
        kept (bool) and outcome
        ("kept", "dropped in the screen ...", "no difference bigger than 2 % ...",
        "resolved worse ...", "not resolved faster", "not tried for lack of budget ...",
        "failed: ...", "not valid: ...", ...), and a note on how it was measured (warm-up
        steps raised so a compile stays out of the measured steps)."""
        return pd.DataFrame([{c: r.get(c) for c in COLUMNS} for r in self.rows],
                            columns=list(COLUMNS))

    @property
    def ab_count(self) -> int:
        """A/Bs made to prove a change (screens not counted)."""
        return sum(r.get("ab") is not None for r in self.rows)

    @property
    def untried(self) -> list:
        """The changes left untried for lack of budget."""
        return [r["change"] for r in self.rows if str(r.get("outcome", "")).startswith(
            OVER_BUDGET)]

    @property
    def left_untried(self) -> list:
        """The moves it meant to try and did not, each a dict: ``change`` (text), ``rule``,
        ``cost_s`` (the seconds its screen or proof was priced at: NaN where it was not
        priced) and ``why`` (the row's outcome: over budget, interrupted, gone after a
        keep)."""
        return [dict(change=r["change"], rule=r.get("rule", ""),
                     cost_s=float(r.get("cost_s", math.nan)), why=r["outcome"])
                for r in self.rows if str(r.get("outcome", "")).startswith(LEFT)]

    @property
    def budget_text(self) -> str:
        """What the exploration spent against its budget, and what it left untried with
        what each would cost."""
        spent = f"{self.elapsed_s:.0f} s" + (f" of a {self.budget_s:.0f} s budget"
                                             if math.isfinite(self.budget_s) else "")
        runs = sum(int(r.get("runs") or 0) for r in self.rows)
        start = f"the start run {fmt_s(self.start_s)}"
        if self.start_warm_s == self.start_warm_s:
            start += (f" (cold; a warm run {fmt_s(self.start_warm_s)}, the prices' base; the "
                      f"cold start's {fmt_s(self.uncharged_s)} not charged to the budget)")
        out = f"spent {spent}: {start}, then {runs} run(s) in screens and A/Bs"
        if self.left_untried:
            out += "; left untried: " + "; ".join(_untried_text(u) for u in self.left_untried)
        return out

    @property
    def numerics(self) -> list:
        """[(change, what its check measured)] for every precision change checked: the
        first-step loss (or output) against full fp32, kept or refused on it."""
        return [(r["change"], r["numerics"]) for r in self.rows if r.get("numerics")]

    @property
    def last_kept(self):
        """The Comparison of the A/B that kept the last change (None: nothing kept)."""
        for r in reversed(self.rows):
            if r.get("kept") and r.get("ab") is not None:
                return self.comparisons[r["ab"]]
        return None

    @property
    def verdict(self) -> Verdict:
        """Best against start: with one change kept, the A/B that kept it; with more, the
        last A/B of start against best (``overall``, lab/explore_overall.py), else - no
        budget left for it - the A/B that kept the last change (its A was the best before
        it), saying so and what the kept A/Bs multiply to; nothing kept: a verdict that
        says so, unresolved."""
        if self.overall is not None and self.overall.verdict.rounds:
            return self.overall.verdict.with_caveats(
                (f"start against best, the {len(self.kept)} kept changes together",))
        cmp = self.last_kept
        if cmp is not None:
            v = cmp.verdict
            if len(self.kept) > 1:
                ratios = [self.comparisons[r["ab"]].verdict.ratio for r in self.rows
                          if r.get("kept") and r.get("ab") is not None]
                prod = math.prod(ratios) if ratios else math.nan
                v = v.with_caveats((f"the last of {len(self.kept)} changes kept, each proven "
                                    "against the best before it"
                                    + (f"; their B/A multiply to {prod:.3g} (not one A/B)"
                                       if prod == prod else "")
                                    + (f"; {self.overall_note}" if self.overall_note else ""),))
            return v
        return Verdict(self.metric, math.nan, math.nan, math.nan, False, 0, self._nothing())

    def _nothing(self) -> str:
        """Why nothing was kept, in the words of what happened (never "nothing tried was
        resolved faster" when nothing was tried)."""
        tried = self.ab_count
        screened = sum(bool(r.get("screen")) for r in self.rows)
        note = f"; {self.note}" if self.note else ""
        if tried:
            return f"{NOTHING} ({tried} A/B{'s' if tried != 1 else ''}{note})"
        if screened:
            over = [r["change"] for r in self.rows if r.get("screen") and
                    str(r.get("outcome", "")).startswith(OVER_BUDGET)]
            dropped = sum(str(r.get("outcome", "")).startswith(DROPPED) for r in self.rows)
            parts = [f"{screened} change(s) screened"]
            if dropped:
                parts.append(f"{dropped} clearly worse there")
            if over:
                parts.append(f"no budget left to prove {', '.join(over)}")
            return f"nothing proven better: {'; '.join(parts)}{note}"
        if self.note and self.planned:
            return f"nothing tried to the end: {self.note}; planned: {', '.join(self.planned)}"
        if self.untried:
            return (f"nothing tried: the budget ({self.budget_s:.0f} s) was spent before the "
                    f"first A/B (the start run took {fmt_s(self.start_s)}){note}")
        mine = sum(str(r.get("outcome", "")).startswith("not tried: the fix is in your code")
                   for r in self.rows)
        if mine:
            return (f"nothing the lab could try: {mine} fix(es) in your code (see steps and "
                    f"the suggestions' code){note}")
        if self.rows:
            return f"nothing tried: no suggested change could run here (see steps){note}"
        return f"nothing to try: the start run's advice found nothing{note}"

    @property
    def changes(self) -> dict:
        """Every field the best config changed from start: {field: (start's, best's)}."""
        return self.start.diff(self.best)

    def code(self) -> str:
        """The winner as code for your own training script: torch.compile's arguments, the
        wrapping (DDP, fully_shard, parallelize_module), autocast's scope, CUDA-graph
        capture and torch._dynamo.config settings, the lines the exploration changed marked
        as such. Valid Python (names such as model, x and loss_fn are yours)."""
        step = self.workload is not None and not isinstance(self.workload, Workload)
        # a fix in the model itself, proven on the model: set where the script builds it
        model = [f"model.{k} = {v!r}   # changed: proven by lab.explore"
                 for patch, _ in self.patches for k, v in patch.items()]
        return script_code(self.best, changed=tuple(self.changes), step=step,
                           nothing=None if self.kept else NOTHING, train=self._trains(),
                           model_lines=model, blocks=not sharded_whole(self.start_run))

    def _trains(self) -> bool:
        wl = self.best_workload if self.best_workload is not None else self.workload
        if isinstance(wl, Workload):
            return wl.loss is not None
        if wl is None and self.best.scenario != "custom":
            from nbtools.config.scenarios import scenario_spec
            return scenario_spec(self.best.scenario).train
        return True          # a step function: its own step, shown as a training one

    def plot(self, **kw):
        """Each A/B's ratio (B over A) with its 95 % interval, kept changes marked (Bokeh)."""
        return view("exploration.plot")(self, **kw)

    def _repr_html_(self) -> str:
        return view("exploration.html")(self)

    def __repr__(self) -> str:
        n = sum(r.get("ab") is not None for r in self.rows)
        left = "; ".join(_untried_text(u) for u in self.left_untried)
        return (f"<Exploration: {n} A/B(s) in {self.elapsed_s:.0f} s, kept "
                f"{', '.join(change_text(c) for c in self.kept) or 'nothing'}; "
                f"{self.verdict.text}" + (f"; left untried: {left}" if left else "") + ">")


def _untried_text(u: dict) -> str:
    cost = f"~{u['cost_s']:.0f} s" if math.isfinite(u["cost_s"]) else "not priced"
    return f"{u['change']} ({cost}: {u['why']})"


def summary_line(ex: Exploration) -> str:
    """One sentence: what was kept and the proof, or the honest no."""
    if not ex.kept:
        return ex.verdict.text
    return f"best: {change_text(dict((k, b) for k, (_, b) in ex.changes.items()))} — " \
           f"{ex.verdict.text}"


def row_label(row: dict) -> str:
    """The name of a steps row on the plot's axis: its change."""
    return row.get("change") or "?"


def finite(x) -> Optional[float]:
    """``x`` as a float, or None when it is missing or not finite (a table cell, not NaN)."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None
