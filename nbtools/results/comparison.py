"""A/B comparison of two runs: what changed in the config and what changed in the numbers."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from nbtools.analysis.metrics import COMPARED, combine
from nbtools.analysis.step_metrics import category_ms as per_category
from nbtools.results.run import Run
from nbtools.results.views import view


@dataclass
class Comparison:
    a: Run
    b: Run

    @property
    def config_diff(self) -> dict:
        if self.a.config is None or self.b.config is None:
            return {}
        return self.a.config.diff(self.b.config)

    @property
    def table(self) -> pd.DataFrame:
        """One row per metric (metrics.COMPARED): A and B, each the run's number as
        metrics.combine makes it from the ranks, B - A and B / A. Metrics neither run has
        are left out."""
        rows = []
        for m in COMPARED:
            va = combine(self.a.summary, m, self.a.config)
            vb = combine(self.b.summary, m, self.b.config)
            if np.isnan(va) and np.isnan(vb):
                continue
            rows.append(dict(metric=m, a=va, b=vb, delta=vb - va,
                             ratio=vb / va if va not in (0,) and not np.isnan(va) else np.nan))
        return pd.DataFrame(rows)

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
