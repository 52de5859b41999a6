"""Rounds as needed (lab.ab rounds="auto"): simulated false-resolved rate with and without the per-look correction, and how many rounds known changes take.

    python benchmarks/verdict_sequential.py
"""
import sys; sys.path.insert(0, "tests/analysis"); sys.path.insert(0, ".")   # run from the repository root
import numpy as np
import test_verdict as T
rng = np.random.default_rng(1)
for noise in sorted(T.NOISE):
    stop, looks = T._sequential(T._log_ratios(12, 4000, 1.0, 0.005, T.NOISE[noise], rng))
    d = T._log_ratios(12, 4000, 1.0, 0.005, T.NOISE[noise], rng); naive = np.zeros(4000, bool)
    for n in range(3, 13): naive |= T._resolved(d[:, :n])
    print(f"A/A {noise:16s} sequential (corrected) {100*(stop>0).mean():.1f} %   uncorrected looks {100*naive.mean():.1f} %")
ln = lambda s: (lambda rng, n: rng.lognormal(0, s, n))
for ratio, sd in ((1.10, .03), (1.05, .02), (1.05, .05), (1.02, .01), (1.02, .02)):
    stop, _ = T._sequential(T._log_ratios(12, 4000, ratio, 0.0, ln(sd), rng))
    ok = stop > 0
    print(f"{ratio:.2f}x in {sd:.0%} noise: resolved {100*ok.mean():.1f} % by 12 rounds, median {np.median(stop[ok]) if ok.any() else float('nan'):.0f} rounds (quartiles {np.percentile(stop[ok],25):.0f}-{np.percentile(stop[ok],75):.0f})")
