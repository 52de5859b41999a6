"""A/B verdicts: B over A with a 95 % bootstrap interval, and words a person can quote.

Pure: numbers in, a Verdict out (scipy.stats.bootstrap does the statistics; no torch, no
bokeh). The lab's rounds (lab/ab.py) and a pair of single runs (results/comparison.py)
feed it; every surface (notebook cell, panel, report, CLI) prints ``Verdict.text``.
"""
from __future__ import annotations

import inspect
import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

from nbtools.analysis import metrics

CONFIDENCE = 0.95
RESAMPLES = 9999
# The same data gives the same interval on every surface and in every re-render.
SEED = 20261201
# Time metrics read as slower/faster; everything else as higher/lower.
_TIME_UNITS = ("ms", "s", "µs")


@dataclass(frozen=True)
class Verdict:
    metric: str
    ratio: float                # B / A of the medians (NaN: no verdict)
    low: float                  # the 95 % interval of the ratio (NaN: none could be made)
    high: float
    resolved: bool              # the interval excludes 1
    rounds: int                 # rounds with a value on both sides (1: single runs)
    text: str
    failed: int = 0             # rounds dropped because a side failed or had no value

    def __str__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        import html
        colour = "#1a7f37" if self.resolved and self.good else \
            "#a40000" if self.resolved and self.good is False else "#444"
        return f"<b style='color:{colour}'>{html.escape(self.text)}</b>"

    @property
    def good(self):
        """True when B is resolved better than A, False when worse, None otherwise (not
        resolved, or a metric with no direction)."""
        way = metrics.better(self.metric)
        if not self.resolved or not way:
            return None
        return (self.ratio < 1) == (way == "lower")

    def to_dict(self) -> dict:
        return dict(metric=self.metric, ratio=self.ratio, low=self.low, high=self.high,
                    resolved=self.resolved, rounds=self.rounds, failed=self.failed,
                    text=self.text)


def rounds_verdict(a, b, metric: str = "step_ms", resamples: int = RESAMPLES) -> Verdict:
    """From per-round values (``a[k]``, ``b[k]``: round k's run of each side, e.g. its
    step_ms, itself the median of the run's steps): the median over rounds of each round's
    B/A, and a 95 % percentile-bootstrap interval of it.

    The resampling unit is the round, A and B of one round together: the rounds are
    interleaved ABBA, so whatever the machine did in a round (clocks, other jobs, the host's
    load) lands on both of its runs and cancels in that round's B/A. (The ratio of the two
    sides' medians would not: with drift of +-20 % between rounds, the median A and the
    median B come from different rounds, and a true 10 % change went unresolved in a quarter
    of simulated 8-round A/Bs that the per-round ratio resolves; tests/test_verdict.py.)
    Steps within a run are not resampled: they follow
    each other on one warm machine, are correlated, and would make the interval as narrow
    as one run's noise while identical runs minutes apart differ by 8-30 % (2 x H200,
    docs/findings.md). A NaN on either side (a failed round) drops that round, said in
    the text."""
    a, b = _floats(a), _floats(b)
    if len(a) != len(b):
        raise ValueError(f"rounds_verdict needs one value per round on each side: got "
                         f"{len(a)} for A and {len(b)} for B")
    keep = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
    failed = int((~keep).sum())
    a, b = a[keep], b[keep]
    n = len(a)
    lost = f", {failed} of {n + failed} rounds dropped (failed or no {metric})" if failed else ""
    if n == 0:
        return _none(metric, 0, failed, f"no verdict on {metric}: no round has a value on "
                     f"both sides{lost}")
    per_round = b / a
    ratio = float(np.median(per_round))
    if n == 1:
        return _none(metric, 1, failed, f"no difference resolved: B/A = {_f(ratio)} from one "
                     f"round, which gives no interval (run 3 rounds or more){lost}", ratio)
    low, high = _interval((per_round,), _median, resamples)
    if n < 3:
        # Two rounds' bootstrap interval is just their range: two rounds that agree by
        # chance would read as a resolved difference. Show it, never resolve on it.
        return Verdict(metric, ratio, low, high, False, n,
                       f"no difference resolved: B/A = {_f(ratio)} (range {_f(low)}-"
                       f"{_f(high)}, {n} rounds{lost}: too few for a trustworthy interval, "
                       "run 5)", failed)
    return _make(metric, ratio, low, high, n, failed, f"{n} rounds{lost}")


def steps_verdict(a_steps, b_steps, metric: str = "step_ms",
                  resamples: int = RESAMPLES, *, center: str = "median",
                  steps: str = "measured") -> Verdict:
    """Two single runs (``lab.compare``): B/A of each run's steps' ``center`` (the median:
    step_ms is one; the mean: profiled_window_ms is one), the interval from resampling each
    run's steps on its own. It covers the noise within each run only, none of the drift
    between two runs made at different times (8-30 % on 2 x H200), and the text says so:
    ``lab.ab`` measures that. Fewer than 3 steps a side never resolve (as rounds: the
    bootstrap of two values is their range). ``steps`` names them in the text."""
    a, b = _floats(a_steps), _floats(b_steps)
    a, b = a[np.isfinite(a) & (a > 0)], b[np.isfinite(b) & (b > 0)]
    caveat = "1 round: within-run noise only, no drift between runs; lab.ab measures it"
    if not len(a) or not len(b):
        return _none(metric, 1, 0, f"no verdict on {metric}: "
                     f"{'A' if not len(a) else 'B'} has no {steps} steps")
    stat, of = (np.median, _ratio_of_medians) if center == "median" else (np.mean, _ratio_of_means)
    ratio = float(stat(b) / stat(a))
    if len(a) < 2 or len(b) < 2:
        return _none(metric, 1, 0, f"no difference resolved: B/A = {_f(ratio)} from "
                     f"fewer than 2 {steps} steps a side, no interval ({caveat})", ratio)
    low, high = _interval((a, b), of, resamples)
    if min(len(a), len(b)) < 3:
        return Verdict(metric, ratio, low, high, False, 1,
                       f"no difference resolved: B/A = {_f(ratio)} (range {_f(low)}-{_f(high)}"
                       f", {min(len(a), len(b))} {steps} steps on a side: too few for a "
                       f"trustworthy interval; {caveat})")
    return _make(metric, ratio, low, high, 1, 0, f"{len(a)} and {len(b)} {steps} steps, "
                 + caveat)


def single_verdict(va: float, vb: float, metric: str) -> Verdict:
    """One value a side and nothing to resample (a metric other than step time of two single
    runs): the ratio, no interval, never resolved."""
    if not (np.isfinite(va) and np.isfinite(vb) and va > 0 and vb >= 0):
        return _none(metric, 1, 0, f"no verdict on {metric}: a side has no value")
    ratio = vb / va
    return _none(metric, 1, 0, f"no difference resolved: B/A = {_f(ratio)}, one value a side "
                 "(no interval; lab.ab gives one)", ratio)


def _floats(v) -> np.ndarray:
    return np.asarray([np.nan if x is None else x for x in np.ravel(v)], dtype=np.float64)


def _ratio_of_medians(a, b, axis=-1):
    return np.median(b, axis=axis) / np.median(a, axis=axis)


def _ratio_of_means(a, b, axis=-1):
    return np.mean(b, axis=axis) / np.mean(a, axis=axis)


def _median(x, axis=-1):
    return np.median(x, axis=axis)


def _interval(data, statistic, resamples: int) -> tuple[float, float]:
    """The 95 % interval of ``statistic`` over ``data`` (samples resampled independently).
    Percentile, not BCa: BCa's acceleration comes from a jackknife, which is unreliable for a
    median (a non-smooth statistic) and turns degenerate (NaN) on the handful of rounds an
    A/B has."""
    if all(np.ptp(d) == 0 for d in data):     # no spread: every resample gives the same value
        r = float(statistic(*(d[None, :] for d in data))[0])
        return r, r
    seed = {"rng" if "rng" in _BOOT_PARAMS else "random_state": np.random.default_rng(SEED)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # DegenerateDataWarning: handled by the caller
        res = stats.bootstrap(data, statistic, vectorized=True,
                              n_resamples=resamples, confidence_level=CONFIDENCE,
                              method="percentile", **seed)
    ci = res.confidence_interval
    return float(ci.low), float(ci.high)


_BOOT_PARAMS = inspect.signature(stats.bootstrap).parameters


def _none(metric, rounds, failed, text, ratio=math.nan) -> Verdict:
    return Verdict(metric, float(ratio), math.nan, math.nan, False, rounds, text, failed)


def _make(metric, ratio, low, high, rounds, failed, how: str) -> Verdict:
    if not (np.isfinite(low) and np.isfinite(high)):
        return _none(metric, rounds, failed, f"no difference resolved: B/A = {_f(ratio)}, no "
                     f"interval could be made ({how})", ratio)
    resolved = bool(low > 1 or high < 1)
    if not resolved:
        text = f"no difference resolved: B/A within {_f(low)}-{_f(high)} ({how})"
    else:
        text = _direction(metric, ratio, low, high, how)
    return Verdict(metric, ratio, low, high, resolved, rounds, text, failed)


def _f(x: float) -> str:
    return f"{x:.2f}" if 0.1 <= abs(x) < 100 else f"{x:.3g}"


def _direction(metric: str, ratio: float, low: float, high: float, how: str) -> str:
    """"B is 1.31x slower (1.22-1.40, 5 rounds)" for a time; a faster B as A/B, its interval
    inverted, so the factor always reads >= 1."""
    time = metrics.unit(metric) in _TIME_UNITS or metric.endswith("_ms")
    up = ratio > 1
    if time:
        word = "slower" if up else "faster"
    else:
        way = metrics.better(metric)
        word = ("higher" if up else "lower") + \
            (f" ({'better' if up == (way == 'higher') else 'worse'})" if way else "")
    f, lo, hi = (ratio, low, high) if up else (1 / ratio, 1 / high, 1 / low)
    what = "" if metric == "step_ms" else f"'s {metric}"
    return f"B{what} is {_f(f)}x {word} ({_f(lo)}-{_f(hi)}, {how})"
