"""The exploration's verdict with several changes kept (issue 51): each was proven against
the best before it, so the verdict is the last A/B of start against best when the budget
made it, else the last keep's, saying what the kept A/Bs multiply to. Pure."""
from __future__ import annotations

from types import SimpleNamespace

from nbtools import StepConfig
from nbtools.analysis.verdict import Verdict
from nbtools.results.exploration import Exploration, new_row

START = StepConfig(scenario="custom")
BEST = START.replace(autocast="bf16", compile="default")


def _v(ratio, text):
    return Verdict("step_ms", ratio, ratio * 0.97, ratio * 1.03, True, 5, text)


def _two_kept():
    rows = []
    for i, change in enumerate(({"autocast": "bf16"}, {"compile": "default"})):
        r = new_row(None, change, {})
        r.update(ab=i, kept=True, outcome="kept")
        rows.append(r)
    cmps = [SimpleNamespace(verdict=_v(0.19, "B is 5.3x faster (5.1-5.5, 5 rounds)")),
            SimpleNamespace(verdict=_v(0.8, "B is 1.25x faster (1.2-1.3, 5 rounds)"))]
    return Exploration(start=START, best=BEST, rows=rows, comparisons=cmps,
                       kept=[{"autocast": "bf16"}, {"compile": "default"}])


def test_two_kept_changes_are_judged_start_against_best_when_that_ab_was_made():
    ex = _two_kept()
    ex.overall = SimpleNamespace(verdict=_v(0.152, "B is 6.58x faster (6.4-6.8, 3 rounds)"))
    assert ex.verdict.ratio == 0.152
    assert ex.verdict.text.startswith("B is 6.58x faster")
    assert "start against best, the 2 kept changes together" in ex.verdict.text


def test_without_that_ab_the_last_keep_says_what_the_kept_abs_multiply_to():
    ex = _two_kept()
    ex.overall_note = "start against best not measured in one A/B: its 3 rounds need ~40 s, 12 s left"
    v = ex.verdict
    assert v.ratio == 0.8 and "the last of 2 changes kept" in v.text
    assert "multiply to 0.152 (not one A/B)" in v.text and "12 s left" in v.text
