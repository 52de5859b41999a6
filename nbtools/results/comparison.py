"""A/B comparison of two runs, or of two configs run in rounds (lab.ab): what changed in the
config, what changed in the numbers, and the verdict with its interval."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import numpy as np
import pandas as pd

from nbtools.analysis.flags import identify
from nbtools.analysis.machine import busy_host
from nbtools.analysis.metrics import COMPARED, combine, is_count
from nbtools.analysis.step_metrics import category_ms as per_category
from nbtools.analysis.verdict import (EQUIVALENCE, Verdict, rounds_verdict, single_verdict,
                                     steps_verdict)
from nbtools.results.run import Run
from nbtools.results.views import view


# Flags that say a run's machine was not its own: a verdict made from such runs says so.
_NOISY = {"host-busy": "on a busy host", "clock-low": "with the GPU clock low",
          "gpu-shared": "on a GPU shared with another process",
          "throttled": "with the GPU throttling", "clock-drop": "with the SM clock falling",
          "compiled-in-timed": "with compiles inside their timed steps"}


@dataclass(frozen=True)
class Comparison:
    """A against B: what changed in the config, in the numbers, and the verdict with its
    interval. ``lab.ab`` makes it from rounds, ``lab.compare`` from two runs.

    Attributes:
        a: A's run whose tables and timelines are shown (under lab.ab, the run nearest
            A's median).
        b: B's, the same way.
        runs_a: every complete round's A runs in run order (None: one run a side).
        runs_b: B's, the same way.
        metric: what ``verdict`` judges.
        per_round: each side's runs in a round (A B B A: 2).
        note: why it holds fewer rounds than asked (stopped, interrupted, a failure).
        looks: the looks ``rounds="auto"`` planned (its interval is widened for them).
        bound: the equivalence bound of the verdict on ``metric`` (0.02: a difference
            under 2 % does not matter; None: none asked).

    Example:
        >>> cmp = lab.ab(StepConfig(), StepConfig(compile="default"), rounds=5)
        >>> print(cmp.verdict)
        >>> cmp.table                    # one row per metric: a, b, delta, ratio, interval
        >>> cmp.config_diff, cmp.plot()

    Frozen: its verdict is computed once, on first use, and kept (every surface that shows
    the comparison reads the same Verdict object); ``dataclasses.replace`` gives a copy
    with its own.
    """
    a: Run
    b: Run
    runs_a: Optional[list] = None
    runs_b: Optional[list] = None
    metric: str = "step_ms"
    per_round: int = 2
    note: str = ""
    looks: int = 1              # looks planned when rounds="auto" chose when to stop
    bound: Optional[float] = None   # the equivalence bound (lab.ab's equivalence=)

    @classmethod
    def from_rounds(cls, runs_a: list, runs_b: list, metric: str = "step_ms",
                    rounds: Optional[int] = None, note: str = "", looks: int = 1,
                    per_round: int = 2, bound: Optional[float] = None) -> "Comparison":
        """Two sides' runs made in A B B A rounds, each in run order, ``per_round`` of each
        a round; only whole rounds (``rounds`` of them, default as many as both sides
        have) enter the verdict. Its ``a`` and ``b`` are each side's run nearest its median
        on ``metric``, for the tables and the timelines. (lab.ab makes it this way.)"""
        n = min(len(runs_a), len(runs_b)) // per_round if rounds is None else rounds
        return cls(_typical(runs_a, metric), _typical(runs_b, metric),
                   list(runs_a[:n * per_round]), list(runs_b[:n * per_round]), metric,
                   per_round, note, looks, bound)

    @classmethod
    def from_runs(cls, runs: list, metric: str = "step_ms",
                  bound: Optional[float] = EQUIVALENCE) -> "Comparison":
        """Runs of two configs in their A B B A order (the CLI's ``run --rounds``, a
        ``sweep(rounds=)`` of two): A is the config that ran first; ``bound`` the
        equivalence bound (lab.ab's default)."""
        if not runs:
            raise ValueError("Comparison.from_runs: no runs")
        first = runs[0].config
        return cls.from_rounds([r for r in runs if r.config == first],
                               [r for r in runs if r.config != first], metric, bound=bound)

    @property
    def rounds(self) -> int:
        """Complete rounds held (1 for two single runs)."""
        return len(self.runs_a) // self.per_round if self.runs_a is not None else 1

    @cached_property
    def verdict(self) -> Verdict:
        """B over A on ``metric`` with its 95 % interval and words (analysis/verdict.py).

        Returns:
            Verdict: over the rounds (lab.ab), or from the two runs' steps (lab.compare:
            no drift covered); its text carries the caveats.

        Example:
            >>> v = cmp.verdict
            >>> f"{v.ratio:.3f} [{v.low:.3f}, {v.high:.3f}]", v.resolved
        """
        return self.verdict_on(self.metric)

    def verdict_on(self, metric: str) -> Verdict:
        """The verdict on any summary metric: over rounds (lab.ab), from each run's steps
        (step_ms: the measured steps; profiled_window_ms: the profiled steps' windows, which
        traces from a person's own job have too), else one value a side and no interval.
        What weakens it (runs on a busy host or a throttled or shared GPU, two different
        workloads, fewer rounds than asked) is added to its text and ``caveats``."""
        if self.runs_a is not None:
            va, vb = self.round_values(metric)
            own = metric == self.metric
            v = rounds_verdict(va, vb, metric, looks=self.looks if own else 1,
                               bound=self.bound if own else None)
        elif metric == "step_ms":
            v = steps_verdict(slowest_rank_steps(self.a), slowest_rank_steps(self.b), metric)
        elif metric == "profiled_window_ms":
            v = steps_verdict(step_windows_ms(self.a), step_windows_ms(self.b), metric,
                              center="mean", steps="profiled")
        else:
            v = single_verdict(_value(self.a, metric), _value(self.b, metric), metric)
        return v.with_caveats(self.caveats)

    def round_values(self, metric: str) -> tuple[list, list]:
        """Per complete round, the values of A's runs and of B's (lists of ``per_round``)."""
        k = self.per_round
        va = [_value(r, metric) for r in self.runs_a or []]
        vb = [_value(r, metric) for r in self.runs_b or []]
        n = min(len(va), len(vb)) // k
        return ([va[i * k:(i + 1) * k] for i in range(n)],
                [vb[i * k:(i + 1) * k] for i in range(n)])

    @property
    def caveats(self) -> tuple:
        """Plain sentences on what weakens this comparison (empty: nothing known)."""
        out = [self.note] if self.note else []
        ca, cb = self.a.config, self.b.config
        wa, wb = (self.a.env.get("workload") if self.a.env else None,
                  self.b.env.get("workload") if self.b.env else None)
        if ca is not None and cb is not None and ca.scenario != cb.scenario:
            out.append(f"A and B are different workloads ({ca.scenario} and {cb.scenario}): "
                       "the ratio compares the workloads, not a setting")
        elif wa and wb and wa != wb and wb.startswith(f"{wa} + model."):
            # lab.explore's model patch (config/workload.with_model_patch): the one change
            # is in the model, on purpose; say which, not that the workloads differ
            out.append(f"B is A's model with {wb[len(wa) + 3:]} set (a fix in the model's "
                       "code, tried on it)")
        elif wa and wb and wa != wb:
            out.append(f"A and B are different workloads ({wa} and {wb}): the ratio "
                       "compares the workloads, not a setting")
        sides = (("A", list(self.runs_a)), ("B", list(self.runs_b))) \
            if self.runs_a is not None else (("A", [self.a]), ("B", [self.b]))
        out += [c for side, rs in sides if (c := _nonfinite_caveat(side, rs))]
        runs = [r for _, rs in sides for r in rs]
        for fid, words in _NOISY.items():
            n = sum(any(identify(f) == fid for f in r.flags) or (fid == "host-busy" and _busy(r))
                    for r in runs)
            if n:
                out.append(f"{n} of {len(runs)} runs {words} (see their flags)")
        return tuple(out)

    @property
    def config_diff(self) -> dict:
        """{field: (A's value, B's value)} for the config fields that differ ({} without configs)."""
        if self.a.config is None or self.b.config is None:
            return {}
        return self.a.config.diff(self.b.config)

    @property
    def table(self) -> pd.DataFrame:
        """Every compared metric side by side, with its own verdict's interval.

        Two single runs: each run's number as metrics.combine makes it from the ranks.
        Under lab.ab: ``a`` and ``b`` are each side's geometric mean over the rounds the
        verdict kept (a metric with zeros or negatives: the arithmetic mean over every
        complete round), so ``ratio`` is ``b / a`` and the verdict's ratio at once; a count
        (compiles, recompiles, graphs) is the most any of the side's runs had, whole.

        Returns:
            pandas.DataFrame: one row per metric (metrics.COMPARED) either run has: metric,
            a, b, delta (B - A), ratio (B / A), low, high, resolved (a surface colours a
            change only where it is resolved).
        """
        rows = []
        for m in COMPARED:
            va, vb = self._sides(m)
            if np.isnan(va) and np.isnan(vb):
                continue
            v = self.verdict_on(m)
            ratio = vb / va if va != 0 and np.isfinite(va) and np.isfinite(vb) else np.nan
            rows.append(dict(metric=m, a=va, b=vb, delta=vb - va, ratio=ratio,
                             low=v.low, high=v.high, resolved=v.resolved))
        return pd.DataFrame(rows)

    def _sides(self, metric: str) -> tuple[float, float]:
        if self.runs_a is None:
            return _value(self.a, metric), _value(self.b, metric)
        ra, rb = self.round_values(metric)
        if is_count(metric):
            # a count stays whole: the most any of the side's runs had, as a run's count is
            # its ranks' most (a mean of 0, 3, 3, 0 compiles read "1.5 compiles"; the
            # geometric mean of 1 and 2 read "1.41")
            return _most(ra), _most(rb)
        kept = [(x, y) for x, y in zip(ra, rb)
                if all(np.isfinite(v) and v > 0 for v in list(x) + list(y))]
        if kept:
            la = np.log([v for x, _ in kept for v in x])
            lb = np.log([v for _, y in kept for v in y])
            return float(np.exp(la.mean())), float(np.exp(lb.mean()))
        fa = np.array([v for x in ra for v in x], dtype=float)
        fb = np.array([v for y in rb for v in y], dtype=float)
        mean = (lambda x: float(np.nanmean(x)) if np.isfinite(x).any() else np.nan)
        return mean(fa), mean(fb)

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


def _most(rounds) -> float:
    vals = [v for x in rounds for v in x if np.isfinite(v)]
    return float(max(vals)) if vals else np.nan


def _nonfinite_caveat(side: str, runs: list) -> str:
    """What a side's steps returned when it was not a number (the engines' last_value,
    run.flags' not-finite): a verdict on times of a diverged computation says so."""
    bad = {}
    for run in runs:
        for r, rep in sorted((run.ranks or {}).items(), key=lambda kv: str(kv[0])):
            v = rep.get("last_value") if isinstance(rep, dict) else None
            if isinstance(v, (int, float)) and not np.isfinite(v):
                bad.setdefault(run.run_id, []).append((r, v))
        if run.run_id not in bad and any(identify(f) == "not-finite" for f in run.flags):
            bad[run.run_id] = []
    if not bad:
        return ""
    values = {_value_word(v) for ranks in bad.values() for _, v in ranks} or {"NaN or inf"}
    ranks = sorted({str(r) for ranks in bad.values() for r, _ in ranks}, key=str)
    where = (f"rank{'s' if len(ranks) > 1 else ''} {', '.join(ranks)}" if ranks else "")
    where += ("; " if where else "") + (f"{len(bad)} of {len(runs)} runs" if len(runs) > 1
                                        else "its last measured step")
    return (f"{side}'s step returned {' and '.join(sorted(values))} ({where}): its times are "
            "of a computation that diverged, not a speed to compare")


def _value_word(x: float) -> str:
    return "NaN" if np.isnan(x) else "inf" if x > 0 else "-inf"


def _busy(run: Run) -> bool:
    """A rank of this run timed its steps on a host busy with something else (the host-busy
    flag's rule; a lab says that flag once, the load stays in every summary)."""
    s = run.summary
    return s is not None and bool(busy_host(s).any())


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


def _typical(runs: list, metric: str):
    """The run nearest the median of ``metric`` among the ok runs (any run when none is)."""
    ok = [r for r in runs if r.ok] or list(runs)
    vals = [combine(r.summary, metric, r.config) for r in ok]
    good = [(v, r) for v, r in zip(vals, ok) if v == v]
    if not good:
        return ok[0]
    good.sort(key=lambda vr: vr[0])
    return good[(len(good) - 1) // 2][1]
