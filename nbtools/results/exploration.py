"""Exploration: what lab.explore tried, what each A/B said, and the winner. The table of
steps, the best config, the verdict that proves it (or the honest "nothing tried was
resolved faster"), and the winner's changes as code for a person's own script. Pure data:
the figure and the HTML come from nbtools.ui through results/views.py."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import pandas as pd

from nbtools.analysis.verdict import Verdict
from nbtools.config.step_config import StepConfig
from nbtools.config.workload import Workload
from nbtools.config.script_code import script_code
from nbtools.results.views import view

COLUMNS = ("change", "rule", "verdict", "ratio", "low", "high", "resolved", "rounds", "runs",
           "seconds", "kept", "outcome")
KEPT = "kept"
NOT_FASTER = "not resolved faster"
OVER_BUDGET = "over budget"
IN_YOUR_CODE = "not tried: the fix is in your code (see the suggestion's code)"
GONE = "not tried: the new best's run no longer shows it, after keeping"
NOTHING = "nothing tried was resolved faster"


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

    @property
    def steps(self) -> pd.DataFrame:
        """One row per change considered: the change, the suggesting rule, the A/B's verdict
        text, ratio (B over A: below 1 is faster), its 95 % interval low-high, resolved,
        rounds, runs made, seconds it took, kept (bool) and outcome ("kept", "not resolved
        faster", "failed: ...", "over budget", "not valid: ...", ...)."""
        return pd.DataFrame([{c: r.get(c) for c in COLUMNS} for r in self.rows],
                            columns=list(COLUMNS))

    @property
    def last_kept(self):
        """The Comparison of the A/B that kept the last change (None: nothing kept)."""
        for r in reversed(self.rows):
            if r.get("kept") and r.get("ab") is not None:
                return self.comparisons[r["ab"]]
        return None

    @property
    def verdict(self) -> Verdict:
        """Best against start: the verdict of the A/B that kept the last change (its A was
        the best before it, which earlier A/Bs proved faster than start), or, when nothing
        was kept, a verdict that says so, unresolved."""
        cmp = self.last_kept
        if cmp is not None:
            v = cmp.verdict
            if len(self.kept) > 1:
                v = v.with_caveats((f"the last of {len(self.kept)} changes kept, each proven "
                                    "against the best before it",))
            return v
        tried = sum(r.get("ab") is not None for r in self.rows)
        text = (f"{NOTHING} ({tried} A/B{'s' if tried != 1 else ''}"
                + (f"; {self.note}" if self.note else "") + ")")
        return Verdict(self.metric, math.nan, math.nan, math.nan, False, 0, text)

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
        code = script_code(self.best, changed=tuple(self.changes), step=step,
                           nothing=None if self.kept else NOTHING, train=self._trains())
        for patch, _ in self.patches:      # a fix in the model itself, proven on the model
            code += "".join(f"\nmodel.{k} = {v!r}   # changed: proven by lab.explore"
                            for k, v in patch.items())
        return code

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
        return (f"<Exploration: {n} A/B(s) in {self.elapsed_s:.0f} s, kept "
                f"{', '.join(change_text(c) for c in self.kept) or 'nothing'}; "
                f"{self.verdict.text}>")


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
