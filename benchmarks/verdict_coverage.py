"""How often does an A/B verdict call identical configs "resolved", and how often does it
resolve a real change? Simulated A/As and A/Bs for every interval method we considered, on
noise shaped like what the lab meets (docs/benchmarks.md, "Verdicts: coverage and power").

    python benchmarks/verdict_coverage.py [--sims 2000] [--seed 1]

Each simulated experiment is a sequence of runs whose log step time is
    base + drift * position + round effect + noise (+ the true change on B's runs)
with noise lognormal (normal in logs), heavy-tailed (Student t, 3 df) or with outliers (one
run in ten 1.5-3x slower: a host hiccup). Designs:
    pairs  rounds of two runs, A B then B A (the design before issue 36), median of per-round
           B/A with a percentile bootstrap (the old rule: about [min, max] at few rounds)
    abba   rounds of four runs, A B B A: a linear drift cancels inside each round
Intervals on the abba rounds' log ratios (B's two runs against A's two):
    t      Student t interval of their mean
    sign   distribution-free order-statistic interval of their median (needs 6 rounds)
    lab    what nbtools.analysis.verdict.rounds_verdict does: t, and from 6 rounds t and
           sign must both exclude 1
Prints the share of A/As called resolved (should be <= 5 %) and of A/Bs resolved.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # nbtools from this checkout


ROUNDS = tuple(range(2, 13))


def runs(rng, sims: int, n_runs: int, noise: str, sd: float, drift: float, block: float):
    """(sims, n_runs) log step times, before any true change."""
    if noise == "lognormal":
        e = rng.normal(0, sd, (sims, n_runs))
    elif noise == "t3":
        e = rng.standard_t(3, (sims, n_runs)) * sd / np.sqrt(3)   # sd-matched
    elif noise == "outliers":
        e = rng.normal(0, sd, (sims, n_runs))
        hit = rng.random((sims, n_runs)) < 0.1
        e = e + hit * np.log(rng.uniform(1.5, 3.0, (sims, n_runs)))
    else:
        raise ValueError(noise)
    return e + drift * np.arange(n_runs)[None, :] + block * rng.standard_normal((sims, 1))


def design(n: int, kind: str) -> np.ndarray:
    """Which runs are B (True) for n rounds."""
    if kind == "pairs":
        return np.array([s for k in range(n) for s in ((0, 1) if k % 2 == 0 else (1, 0))], bool)
    return np.array([s for _ in range(n) for s in (0, 1, 1, 0)], bool)


def per_round_logratio(x: np.ndarray, is_b: np.ndarray, per: int) -> np.ndarray:
    sims, n_runs = x.shape
    r = x.reshape(sims, n_runs // per, per)
    b = is_b.reshape(-1, per)[0] if per == 4 else None
    if per == 4:
        return r[:, :, b].mean(-1) - r[:, :, ~b].mean(-1)
    m = is_b.reshape(-1, 2)
    return np.where(m[:, 1], r[:, :, 1] - r[:, :, 0], r[:, :, 0] - r[:, :, 1])


def resolved_old(d: np.ndarray) -> np.ndarray:
    out = np.zeros(len(d), bool)
    if d.shape[1] < 3:
        return out
    for i, row in enumerate(d):
        res = stats.bootstrap((row,), np.median, n_resamples=999, method="percentile",
                              confidence_level=0.95, rng=np.random.default_rng(i))
        ci = res.confidence_interval
        out[i] = ci.low > 0 or ci.high < 0
    return out


def sign_k(n: int):
    """The largest k with P(Binomial(n, 1/2) < k) <= 2.5 %: [x_(k), x_(n-k+1)] is then a
    distribution-free 95 % interval of the median; None when even [min, max] is not."""
    k = None
    for j in range(1, n // 2 + 1):
        if stats.binom.cdf(j - 1, n, 0.5) <= 0.025:
            k = j
    return k


def resolved_t(d: np.ndarray) -> np.ndarray:
    n = d.shape[1]
    m, s = d.mean(1), d.std(1, ddof=1)
    half = stats.t.ppf(0.975, n - 1) * s / np.sqrt(n)
    return (m - half > 0) | (m + half < 0)


def resolved_sign(d: np.ndarray) -> np.ndarray:
    n = d.shape[1]
    k = sign_k(n)
    if k is None:
        return np.zeros(len(d), bool)
    s = np.sort(d, 1)
    return (s[:, k - 1] > 0) | (s[:, n - k] < 0)


def resolved_lab(d: np.ndarray) -> np.ndarray:
    from nbtools.analysis.verdict import rounds_verdict
    return np.array([rounds_verdict([1.0] * len(row), np.exp(row)).resolved for row in d])


def rate(noise, sd, drift, block, change, method, n, sims, rng) -> float:
    kind = "pairs" if method == "old" else "abba"
    is_b = design(n, kind)
    x = runs(rng, sims, len(is_b), noise, sd, drift, block) + np.log(change) * is_b[None, :]
    d = per_round_logratio(x, is_b, 2 if kind == "pairs" else 4)
    return float({"old": resolved_old, "t": resolved_t, "sign": resolved_sign,
                  "lab": resolved_lab}[method](d).mean())


CASES = (   # name, noise, per-run sd (log), drift per run, between-round block sd
    ("lognormal sd 0.2", "lognormal", 0.2, 0.0, 0.0),
    ("t3 sd 0.2", "t3", 0.2, 0.0, 0.0),
    ("outliers sd 0.05", "outliers", 0.05, 0.0, 0.0),
    ("lognormal 0.01 + drift", "lognormal", 0.01, 0.004, 0.0),   # the H200's +3.7 % in 24 runs
    ("lognormal 0.1 + rounds +-20 %", "lognormal", 0.1, 0.0, 0.2),
)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sims", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--old-sims", type=int, default=400, help="the bootstrap is slow")
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    print(f"A/A: share called resolved ({a.sims} simulated A/As per cell; old: {a.old_sims})")
    print(f"{'case':32s} {'method':6s} " + " ".join(f"{n:>5d}" for n in ROUNDS))
    for name, noise, sd, drift, block in CASES:
        for method in ("old", "t", "sign", "lab"):
            sims = a.old_sims if method == "old" else a.sims
            vals = [rate(noise, sd, drift, block, 1.0, method, n, sims, rng) for n in ROUNDS]
            print(f"{name:32s} {method:6s} " + " ".join(f"{100 * v:5.1f}" for v in vals))
    print("\nA/B: share resolved (the change is on B)")
    for name, noise, sd, change in (("10 % change, 3 % noise", "lognormal", 0.03, 1.10),
                                    ("2 % change, 1 % noise", "lognormal", 0.01, 1.02),
                                    ("5 % change, 5 % noise", "lognormal", 0.05, 1.05),
                                    ("30 % change, 20 % noise", "lognormal", 0.2, 1.30),
                                    ("10 % change, t3 5 %", "t3", 0.05, 1.10)):
        for method in ("t", "sign", "lab"):
            vals = [rate(noise, sd, 0.0, 0.0, change, method, n, a.sims, rng) for n in ROUNDS]
            print(f"{name:32s} {method:6s} " + " ".join(f"{100 * v:5.1f}" for v in vals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
