"""A/B comparison of two runs, or of two configs run in rounds (lab.ab): what changed in the
config, what changed in the numbers, and the verdict with its interval."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from nbtools.analysis.metrics import COMPARED, combine
from nbtools.analysis.step_metrics import category_ms as per_category
from nbtools.analysis.verdict import Verdict, rounds_verdict, single_verdict, steps_verdict
from nbtools.results.run import Run
from nbtools.results.views import view


@dataclass
class Comparison:
    """``a``/``b``: the runs whose tables and timelines are shown (under lab.ab, each side's
    run nearest its median); ``runs_a``/``runs_b``: every round's run in round order (None:
    one run a side, lab.compare); ``metric``: what ``verdict`` judges."""
    a: Run
    b: Run
    runs_a: Optional[list] = None
    runs_b: Optional[list] = None
    metric: str = "step_ms"

    @property
    def rounds(self) -> int:
        return len(self.runs_a) if self.runs_a is not None else 1

    @property
    def verdict(self) -> Verdict:
        """B over A on ``metric`` with its 95 % interval and words (analysis/verdict.py)."""
        return self.verdict_on(self.metric)

    def verdict_on(self, metric: str) -> Verdict:
        """The verdict on any summary metric: over rounds (lab.ab), from each run's steps
        (step_ms: the measured steps; profiled_window_ms: the profiled steps' windows, which
        traces from a person's own job have too), else one value a side and no interval."""
        if self.runs_a is not None:
            return rounds_verdict([_value(r, metric) for r in self.runs_a],
                                  [_value(r, metric) for r in self.runs_b], metric)
        if metric == "step_ms":
            return steps_verdict(slowest_rank_steps(self.a), slowest_rank_steps(self.b), metric)
        if metric == "profiled_window_ms":
            return steps_verdict(step_windows_ms(self.a), step_windows_ms(self.b), metric,
                                 center="mean", steps="profiled")
        return single_verdict(_value(self.a, metric), _value(self.b, metric), metric)

    @property
    def config_diff(self) -> dict:
        if self.a.config is None or self.b.config is None:
            return {}
        return self.a.config.diff(self.b.config)

    @property
    def table(self) -> pd.DataFrame:
        """One row per metric (metrics.COMPARED): A and B, each the run's number as
        metrics.combine makes it from the ranks (under lab.ab the median over rounds), B - A,
        B / A (under lab.ab the verdict's: the median of the rounds' B/A), and the verdict's
        interval ``low``-``high`` and ``resolved``: a surface colours
        a change only where it is resolved. Metrics neither run has are left out."""
        rows = []
        for m in COMPARED:
            va, vb = self._side(self.a, self.runs_a, m), self._side(self.b, self.runs_b, m)
            if np.isnan(va) and np.isnan(vb):
                continue
            v = self.verdict_on(m)
            ratio = vb / va if va not in (0,) and not np.isnan(va) else np.nan
            if self.runs_a is not None and np.isfinite(v.ratio):
                ratio = v.ratio      # the verdict's (the median round's B/A), inside its interval
            rows.append(dict(metric=m, a=va, b=vb, delta=vb - va, ratio=ratio,
                             low=v.low, high=v.high, resolved=v.resolved))
        return pd.DataFrame(rows)

    @staticmethod
    def _side(run, runs, metric: str) -> float:
        if runs is None:
            return _value(run, metric)
        v = pd.Series([_value(r, metric) for r in runs], dtype=float)
        return float(v.median()) if v.notna().any() else np.nan

    @property
    def category_deltas(self) -> pd.DataFrame:
        """Per category, time per profiled step and rank (ms): A, B, B - A (the same numbers
        as the delta chart of ``plot()``)."""
        ca, cb = category_ms(self.a), category_ms(self.b)
        df = pd.concat([ca.rename("a"), cb.rename("b")], axis=1).fillna(0.0)
        df["delta"] = df["b"] - df["a"]
        return df.reset_index().rename(columns={"index": "category"})

    def plot(self, **kw):
        """Both timelines aligned at their first profiled step, and per-category deltas."""
        return view("comparison.plot")(self, **kw)

    def _repr_html_(self) -> str:
        return view("comparison.html")(self)


def category_ms(run: Run) -> pd.Series:
    """Milliseconds per event category over the run's profiled steps (analysis.category_ms)."""
    return per_category(run.events, run.steps)


def _value(run: Run, metric: str) -> float:
    """A run's one number for ``metric`` (NaN for a failed run: its round is dropped)."""
    if not run.ok:
        return np.nan
    return combine(run.summary, metric, run.config)


def step_windows_ms(run: Run) -> np.ndarray:
    """Each profiled step's window (ms: its range widened to its own GPU work), averaged over
    the ranks: the values whose mean is the run's profiled_window_ms (the mean over ranks of
    each rank's mean over its steps, metrics.combine, when the ranks profiled the same
    steps)."""
    from nbtools.analysis.breakdown import step_windows
    if not run.ok or run.events is None or not len(run.events):
        return np.array([])
    w = step_windows(run.events)
    return w.groupby("step")["window_ms"].mean().to_numpy(np.float64) if len(w) else np.array([])


def slowest_rank_steps(run: Run) -> np.ndarray:
    """The measured step times (ms) of the rank with the slowest median, the rank whose
    median is the run's step_ms (metrics.combine: max over ranks)."""
    st = run.steps
    if st is None or not len(st) or not run.ok:
        return np.array([])
    m = st[st["phase"] == "measured"]
    if not len(m):
        return np.array([])
    ms = m.groupby("rank")["dur_ns"].apply(lambda d: d.to_numpy(np.float64) / 1e6)
    slow = max(ms.index, key=lambda r: np.median(ms[r]))
    return ms[slow]
