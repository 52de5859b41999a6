"""A/B verdicts: B over A with a 95 % interval, and words a person can quote.

Pure: numbers in, a Verdict out (scipy.stats does the statistics; no torch, no bokeh).
Rounds: Student's t on the rounds' log ratios (plus a distribution-free check from 6
rounds); two single runs: a bootstrap of their steps. The lab's rounds (lab/ab.py) and a pair of single runs (results/comparison.py)
feed it; every surface (notebook cell, panel, report, CLI) prints ``Verdict.text``.
"""
from __future__ import annotations

import inspect
import math
import warnings
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from nbtools.analysis import metrics
from nbtools.common.units import fmt_range, fmt_ratio as _f

CONFIDENCE = 0.95
RESAMPLES = 9999
# The same data gives the same interval on every surface and in every re-render.
SEED = 20261201
# Time metrics read as slower/faster; everything else as higher/lower.
_TIME_UNITS = ("ms", "s", "µs")


@dataclass(frozen=True)
class Verdict:
    """B over A on one metric, with its 95 % interval and the words to quote.

    ``lab.ab`` makes it from rounds (Student's t on the rounds' log ratios), ``lab.compare``
    from two runs' steps; every surface prints ``text``. Frozen: ``with_caveats`` gives a
    copy.

    Attributes:
        metric: the summary metric judged (nbtools.analysis.metrics), e.g. "step_ms".
        ratio: B / A (over rounds: of the geometric means); NaN when there is no verdict.
        low: the interval's low end (NaN when none could be made).
        high: its high end.
        resolved: the interval excludes 1: B differs from A.
        rounds: rounds with a value on both sides (1: two single runs).
        text: the verdict in words, caveats included.
        failed: rounds dropped because a side failed or had no value.
        caveats: what weakens it (a busy host, two workloads, stopped early).
        bound: the equivalence bound asked for (0.02: a difference under 2 % does not
            matter); NaN when none was.
        equivalent: the whole interval lies within [1/(1+bound), 1+bound]: whatever the
            difference is, it is smaller than the bound ("no difference bigger than 2 %").

    Example:
        >>> v = lab.ab(StepConfig(), StepConfig(compile="default"), rounds=5).verdict
        >>> print(v)                     # its text
        >>> v.resolved, v.ratio, (v.low, v.high), v.good
    """
    metric: str
    ratio: float                # B / A (rounds: of the geometric means; NaN: no verdict)
    low: float                  # the 95 % interval of the ratio (NaN: none could be made)
    high: float
    resolved: bool              # the interval excludes 1
    rounds: int                 # rounds with a value on both sides (1: single runs)
    text: str
    failed: int = 0             # rounds dropped because a side failed or had no value
    caveats: tuple = ()         # what weakens it (busy host, other workloads, stopped early)
    bound: float = math.nan     # the equivalence bound asked for (0.02 = 2 %)
    equivalent: bool = False    # the interval lies inside +-bound: no difference that matters

    def with_caveats(self, caveats) -> "Verdict":
        """This verdict with ``caveats`` added: each also ends its text, after a semicolon."""
        caveats = tuple(c for c in caveats if c and c not in self.caveats)
        if not caveats:
            return self
        return replace(self, caveats=self.caveats + caveats,
                       text=self.text + "".join(f"; {c}" for c in caveats))

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

    @property
    def outcome(self) -> str:
        """One word: better or worse (B resolved so on a metric with a direction), equivalent
        (within the bound, not resolved either way), different (resolved, no direction), or
        unresolved."""
        if self.resolved:
            good = self.good
            return "different" if good is None else ("better" if good else "worse")
        return "equivalent" if self.equivalent else "unresolved"

    def to_dict(self) -> dict:
        """Every field as plain JSON-ready values (caveats as a list): for files and reports."""
        return dict(metric=self.metric, ratio=self.ratio, low=self.low, high=self.high,
                    resolved=self.resolved, rounds=self.rounds, failed=self.failed,
                    text=self.text, caveats=list(self.caveats), bound=self.bound,
                    equivalent=self.equivalent)


# Below this many rounds no interval holds 95 % without assuming the noise's shape: all
# rounds the same way happens with probability 2 / 2**n by chance alone (6.25 % at 5).
FREE_ROUNDS = 6


def rounds_verdict(a, b, metric: str = "step_ms", *, looks: int = 1,
                   bound: float | None = None) -> Verdict:
    """B over A from rounds. ``a[k]``, ``b[k]``: round k's value(s) of each side: one number,
    or the side's runs in that round (two in an A B B A round), each e.g. that run's
    step_ms (itself the median of its steps).

    Each round gives one log ratio, the mean log of B's runs minus the mean log of A's: in
    an A B B A round a drift that is linear in time lands equally on both sides and
    cancels, whatever the number of rounds (a round of A B then B A left it in the ratio
    whenever the count was odd). Whatever the machine did between rounds (clocks, other
    jobs: 8-30 % on 2 x H200) cancels in each round's ratio too. The ratio is
    exp(mean of the rounds' log ratios): B's geometric mean over A's, over the rounds kept.

    The 95 % interval is Student's t on those log ratios. Simulated identical-config A/As
    (normal, heavy-tailed and outlier noise, a drift, rounds +-20 % apart) call at most 5 %
    resolved at every count from 2 to 12 (heavy tails and outliers make it conservative),
    where the median of 2-run rounds with a percentile bootstrap, about [min, max], called
    up to 30 % (benchmarks/verdict_coverage.py, docs/benchmarks.md). Below FREE_ROUNDS no
    interval reaches 95 % without an assumption on the noise's shape (all rounds one way
    happens by chance with probability 2 / 2**n), and the text says so. A distribution-free
    rule from FREE_ROUNDS on (the sign test's interval) lost power where t gains it: a
    true 2 % change in 1 % noise resolved 89 % of the time at 5 rounds, 86 % at 6, 83 % at 8.

    ``looks``: how many looks at the rounds were planned to decide when to stop (lab.ab with
    rounds="auto" looks after every round from the third): every look's interval is then at
    1 - 5 %/looks (Bonferroni), so stopping at the first resolved look still calls at most
    5 % of A/As resolved, and the text says so. Steps within a run are not
    resampled: they follow each other on
    one warm machine and would make the interval as narrow as one run's noise. A round with
    a failed run or no value (NaN, <= 0) is dropped, said in the text.

    ``bound`` (e.g. 0.02): the difference that matters. When the whole interval lies within
    [1/(1+bound), 1+bound] the verdict is ``equivalent``: "no difference bigger than 2 %"
    (two one-sided tests at 2.5 % each, since the 95 % interval is used; the looks'
    widening applies as to the difference test, so stopping at the first equivalent look
    keeps its error rate)."""
    ra, rb = _per_round(a), _per_round(b)
    if len(ra) != len(rb):
        raise ValueError(f"rounds_verdict needs one value per round on each side: got "
                         f"{len(ra)} for A and {len(rb)} for B")
    keep = [all(np.isfinite(x) and x > 0 for x in ka + kb) and ka and kb
            for ka, kb in zip(ra, rb)]
    d = np.array([np.mean(np.log(kb)) - np.mean(np.log(ka))
                  for ka, kb, k in zip(ra, rb, keep) if k], dtype=np.float64)
    failed = len(keep) - len(d)
    n = len(d)
    lost = f", {failed} of {n + failed} rounds dropped (failed or no {metric})" if failed else ""
    if n == 0:
        return _none(metric, 0, failed, f"no verdict on {metric}: no round has a value on "
                     f"both sides{lost}")
    ratio = float(np.exp(d.mean()))
    if n == 1:
        return _none(metric, 1, failed, f"no difference resolved: B/A = {_f(ratio)} from one "
                     f"round, which gives no interval (run {FREE_ROUNDS} rounds){lost}", ratio)
    level = 1 - (1 - CONFIDENCE) / max(1, looks)
    low, high = t_interval(d, level)
    how = f"{n} rounds{lost}"
    if looks > 1:
        how += f"; {100 * level:.3g} % at each of up to {looks} looks"
    if n < FREE_ROUNDS:
        how += f"; normal noise assumed below {FREE_ROUNDS} rounds"
    return _equivalence(_make(metric, ratio, low, high, n, failed, how), bound)


EQUIVALENCE = 0.02
"""The default equivalence bound of verdicts over rounds (lab.ab, the panel, the CLI): a
difference under 2 % is one no change is worth keeping for; identical configs on 1 x H200
read within about 1 % of each other at 5-12 rounds (docs/findings.md §12)."""


def check_bound(bound) -> float | None:
    """The equivalence bound as a float in (0, 1), or None; ValueError naming it otherwise."""
    if bound is None:
        return None
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not 0 < bound < 1:
        raise ValueError(f"equivalence={bound!r}: give the relative difference that does not "
                         "matter, a number between 0 and 1 (0.02: 2 %), or None for no bound")
    return float(bound)


def _equivalence(v: Verdict, bound: float | None) -> Verdict:
    """``v`` with its equivalence against ``bound`` decided and said."""
    if bound is None:
        return v
    b = float(bound)
    inside = bool(np.isfinite(v.low) and np.isfinite(v.high) and v.low >= 1 / (1 + b)
                  and v.high <= 1 + b)
    text = v.text
    if inside and not v.resolved:
        text = "no difference bigger than " + bound_text(b) + text[len("no difference resolved"):]
    elif inside:
        text = f"{text}; within the {bound_text(b)} that matters"
    return replace(v, bound=b, equivalent=inside, text=text)


def bound_text(b: float) -> str:
    """An equivalence bound as a verdict's text says it (0.02: "2 %")."""
    return f"{100 * b:.3g} %"


def t_interval(d, level: float = CONFIDENCE) -> tuple:
    """The Student t interval (95 % by default) of exp(mean) of log ratios ``d`` over its
    last axis (2 or more values): floats for one set of rounds, arrays for many (the
    simulations)."""
    d = np.asarray(d, dtype=np.float64)
    n, m = d.shape[-1], d.mean(-1)
    half = stats.t.ppf(0.5 + level / 2, n - 1) * d.std(-1, ddof=1) / np.sqrt(n)
    low, high = np.exp(m - half), np.exp(m + half)
    return (float(low), float(high)) if d.ndim == 1 else (low, high)


def _per_round(v) -> list:
    """Each round's values as a tuple of floats (None: NaN)."""
    out = []
    for x in v:
        xs = x if isinstance(x, (list, tuple, np.ndarray)) else (x,)
        out.append(tuple(np.nan if y is None else float(y) for y in np.ravel(xs)))
    return out


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
        text = f"no difference resolved: B/A within {fmt_range(low, high)} ({how})"
    else:
        text = _direction(metric, ratio, low, high, how)
    return Verdict(metric, ratio, low, high, resolved, rounds, text, failed)


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
    return f"B{what} is {_f(f)}x {word} ({fmt_range(lo, hi)}, {how})"
