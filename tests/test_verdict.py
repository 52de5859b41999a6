"""The A/B verdict's statistics on synthetic data with known answers (analysis/verdict.py):
pure, no lab. The interval is checked against a bootstrap written out here from its
definition, against data whose answer is exact, and for coverage of a known ratio."""
import math

import numpy as np
import pytest

from nbtools.analysis.verdict import rounds_verdict, single_verdict, steps_verdict

DRIFT = np.array([0.5, 2.0, 1.0, 1.6, 0.7])     # a machine whose speed moves 4x between rounds


def test_paired_rounds_cancel_drift_that_unpaired_resampling_would_not():
    # B is exactly 1.3x A in every round, the rounds themselves 4x apart: resampling rounds
    # as pairs gives 1.3 with a narrow interval; resampling A and B apart would mix rounds and
    # span far beyond 1 on both sides (this test fails if the pairing is lost)
    rng = np.random.default_rng(0)
    a = 10 * DRIFT * (1 + 0.002 * rng.standard_normal(5))
    b = 13 * DRIFT * (1 + 0.002 * rng.standard_normal(5))
    v = rounds_verdict(a, b)
    assert v.ratio == pytest.approx(1.3, rel=0.01)
    assert 1.25 < v.low <= v.ratio <= v.high < 1.35
    assert v.resolved and v.rounds == 5 and v.failed == 0
    assert v.text.startswith("B is 1.30x slower (1.") and v.text.endswith(", 5 rounds)")
    assert v.good is False


def _reference_interval(a, b, n=20000, seed=1):
    """A paired percentile bootstrap from its definition: resample rounds with replacement,
    take the median of their B/A, the 2.5th and 97.5th percentiles."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), size=(n, len(a)))
    r = np.median((b / a)[idx], axis=1)
    return np.percentile(r, [2.5, 97.5])


def test_interval_matches_the_bootstrap_from_its_definition():
    rng = np.random.default_rng(2)
    a = rng.lognormal(np.log(20), 0.05, 12)
    b = rng.lognormal(np.log(22), 0.05, 12)
    v = rounds_verdict(a, b)
    lo, hi = _reference_interval(a, b)
    assert v.ratio == pytest.approx(np.median(b / a))
    # the same statistic, level and pairing: equal up to resampling noise (a 90 % interval,
    # A over B, or unpaired resampling lands well outside this)
    assert v.low == pytest.approx(lo, rel=0.01) and v.high == pytest.approx(hi, rel=0.01)


def test_coverage_of_a_known_ratio():
    # 200 experiments of 8 rounds drifting +-20 %, B truly 1.1x A with 5 % noise a run: a
    # 95 % interval should hold the true ratio in about 95 % of them: a percentile bootstrap
    # of a median over 8 rounds undercovers (174 of 200 here); a wrong interval (of one side
    # only, a 50 % level, drift left in) holds it far less often. Each round's B/A varies by
    # about 7 %, so a 10 % change is resolved most of the time (176 of 200 here; the ratio of
    # the two sides' medians, drift not cancelled round by round, resolved 146)
    rng = np.random.default_rng(3)
    hits = resolved = 0
    for _ in range(200):
        d = rng.uniform(0.8, 1.2, 8)
        a = 10 * d * rng.lognormal(0, 0.05, 8)
        b = 11 * d * rng.lognormal(0, 0.05, 8)
        v = rounds_verdict(a, b, resamples=999)
        hits += v.low <= 1.1 <= v.high
        resolved += v.resolved
    assert 0.85 <= hits / 200 <= 1.0
    assert resolved / 200 > 0.8


def test_identical_configs_are_not_resolved_and_say_within():
    rng = np.random.default_rng(4)
    a = 10 * DRIFT * rng.lognormal(0, 0.03, 5)
    b = 10 * DRIFT * rng.lognormal(0, 0.03, 5)
    v = rounds_verdict(a, b)
    assert not v.resolved and v.low < 1 < v.high and v.good is None
    assert v.text == f"no difference resolved: B/A within {v.low:.2f}-{v.high:.2f} (5 rounds)"


def test_faster_b_reads_as_a_factor_above_one_with_the_interval_inverted():
    a = 10 * DRIFT
    b = 8 * DRIFT * np.array([1.0, 1.01, 0.99, 1.0, 1.02])
    v = rounds_verdict(a, b)
    assert v.ratio == pytest.approx(0.8, rel=0.01) and v.high < 1 and v.good is True
    assert v.text == f"B is {1 / v.ratio:.2f}x faster ({1 / v.high:.2f}-{1 / v.low:.2f}, 5 rounds)"


def test_higher_is_better_metrics_say_higher_and_better():
    a = 100 * DRIFT
    b = 120 * DRIFT * np.array([1.0, 1.01, 0.99, 1.0, 1.02])
    v = rounds_verdict(a, b, metric="items_per_s")
    assert v.resolved and v.good is True
    assert v.text.startswith("B's items_per_s is 1.20x higher (better) (")


def test_degenerate_input_gives_words_not_exceptions():
    one = rounds_verdict([10.0], [12.0])
    assert not one.resolved and one.rounds == 1 and math.isnan(one.low)
    assert "one round" in one.text and one.ratio == pytest.approx(1.2)
    flat = rounds_verdict([10.0] * 5, [12.0] * 5)          # no spread at all
    assert flat.resolved and flat.low == flat.high == pytest.approx(1.2)
    same = rounds_verdict([10.0] * 5, [10.0] * 5)
    assert not same.resolved and same.text.startswith("no difference resolved: B/A within 1.00-1.00")
    failed = rounds_verdict([10, 11, np.nan, 10.5, 9.8], [13, 14.2, 13.1, None, 12.9])
    assert failed.rounds == 3 and failed.failed == 2
    assert "2 of 5 rounds dropped (failed or no step_ms)" in failed.text
    none = rounds_verdict([np.nan] * 3, [1.0, 2.0, 3.0])
    assert not none.resolved and none.text.startswith("no verdict on step_ms: no round")
    two = rounds_verdict([10, 10.2], [13, 13.1])   # both rounds agree: still no verdict
    assert not two.resolved and two.good is None and two.ratio == pytest.approx(1.2934, 1e-3)
    assert two.text.startswith("no difference resolved: B/A = 1.29 (range 1.28-1.30, 2 rounds")
    assert two.text.endswith("too few for a trustworthy interval, run 5)")
    with pytest.raises(ValueError, match="one value per round"):
        rounds_verdict([1, 2, 3], [1, 2])


def test_two_single_runs_resample_their_steps_and_say_no_drift():
    rng = np.random.default_rng(5)
    a = rng.normal(10, 0.3, 40)
    b = rng.normal(12, 0.3, 40)
    v = steps_verdict(a, b)
    assert v.rounds == 1 and v.resolved and v.low < 1.2 < v.high
    assert "no drift between runs" in v.text and v.text.startswith("B is 1.2")
    assert not steps_verdict([], b).resolved
    assert "fewer than 2 measured steps" in steps_verdict([10.0], b).text
    # two steps a side agreeing by chance: shown, never resolved (as two rounds)
    two = steps_verdict([10.0, 10.1], [13.0, 13.2])
    assert not two.resolved and "2 measured steps on a side: too few" in two.text
    # profiled_window_ms is a mean over steps: its verdict's ratio is of the means
    m = steps_verdict([4.0, 4.0, 7.0], [2.0, 2.0, 2.0], "profiled_window_ms", center="mean",
                      steps="profiled")
    assert m.ratio == pytest.approx(2.0 / 5.0) and "3 and 3 profiled steps" in m.text


def test_two_trace_runs_get_a_verdict_on_their_profiled_step_windows():
    """The committed 2 x H200 TP traces, eager (A) and reduce-overhead (B): the verdict on
    profiled_window_ms comes from each run's per-step windows (averaged over ranks), its
    ratio is the table's B/A, and the CPU step range (0.6 ms under CUDA graphs, where the
    GPU works 2.2 ms) is not what is judged."""
    from nbtools import load_traces
    from nbtools.common.package_data import h200_traces_dir
    from nbtools.results.comparison import Comparison, step_windows_ms
    d = h200_traces_dir()
    a, b = (load_traces(sorted(d.glob(f"tp_{m}_rank*.json.gz"))) for m in
            ("off", "reduce-overhead"))
    assert len(step_windows_ms(a)) == len(step_windows_ms(b)) == 3
    cmp = Comparison(a, b, metric="profiled_window_ms")
    v, row = cmp.verdict, cmp.table.set_index("metric").loc["profiled_window_ms"]
    assert v.rounds == 1 and v.ratio == pytest.approx(row["b"] / row["a"])
    assert v.resolved and v.good and v.low <= v.ratio <= v.high < 1
    assert "faster" in v.text and "3 and 3 profiled steps" in v.text
    assert "no drift between runs" in v.text
    assert row["resolved"] and row["low"] == v.low
    s = single_verdict(3.0, 4.0, "compute_ms")
    assert not s.resolved and "one value a side" in s.text
    assert "a side has no value" in single_verdict(float("nan"), 4.0, "compute_ms").text
