"""lab.ab's options (lab/ab_options.py): one frozen object, checked when made, so a bad value
is one ConfigError naming the option and what to give; the equivalence bound's default is
analysis/verdict.py's EQUIVALENCE (issue 53). No lab needed: nothing runs."""
from __future__ import annotations

import dataclasses
import math
import threading

import pytest

from nbtools.analysis.verdict import EQUIVALENCE
from nbtools.config.step_config import ConfigError
from nbtools.lab.ab_options import ABOptions


@pytest.mark.parametrize("kw, says", [
    (dict(rounds="many"), r"rounds='many': give a whole number of rounds .* or 'auto'"),
    (dict(rounds=0), r"rounds=0: give a whole number from 1 to"),
    (dict(rounds=2.5), r"rounds=2.5: give a whole number of rounds"),
    (dict(rounds="auto", max_rounds=2), r"max_rounds=2: rounds='auto' looks from round 3"),
    (dict(max_rounds=True), r"max_rounds=True: give a whole number"),
    (dict(width=-1), r"width=-1: give the interval's relative width"),
    (dict(equivalence=1.5), r"equivalence=1.5: give the relative difference that does not "
                            r"matter"),
    (dict(equivalence="2%"), r"equivalence='2%'"),
    (dict(timeout=-3), r"timeout=-3: not above 0; give a number of seconds"),
    (dict(timeout=math.inf), r"timeout=inf: not finite"),
    (dict(on_run=5), r"on_run=5: give a function"),
    (dict(stop=object()), r"stop=<object .*>: give an object with is_set\(\)"),
    (dict(metric="nope"), r"metric='nope' is not a summary number; pick one of: "),
    (dict(metric=3), r"metric=3: give one metric's name as a string"),
])
def test_a_bad_option_is_one_error_naming_it_and_what_to_give(kw, says):
    with pytest.raises(ConfigError, match=says):
        ABOptions(**kw)


def test_options_are_checked_values_frozen_with_verdicts_default_bound():
    o = ABOptions()
    assert o.equivalence == EQUIVALENCE and o.rounds == 5 and o.most == 5 and not o.auto
    stop = threading.Event()
    auto = ABOptions(rounds="auto", max_rounds=8, equivalence=None, timeout=30, stop=stop)
    assert auto.auto and auto.most == 8 and auto.equivalence is None and auto.stop is stop
    assert isinstance(auto.timeout, float) and isinstance(ABOptions(equivalence=1 / 20)
                                                          .equivalence, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.rounds = 3
    # what the explorer derives for a screen stays checked: a bad value is still refused
    assert dataclasses.replace(auto, rounds=1).most == 1
    with pytest.raises(ConfigError, match="rounds=0"):
        dataclasses.replace(auto, rounds=0)
