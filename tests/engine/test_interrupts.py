"""common/interrupts.held with real SIGINTs to this process (no engines): what a Ctrl-C does
inside, at the end of and around held work. tests/lab/test_interrupt_save.py checks it where
it matters, around a lab's runs and saves."""
from __future__ import annotations

import os
import signal

import pytest

from nbtools.common.interrupts import held


def ctrl_c():
    """A real SIGINT to this process; Python runs its handler before the next line."""
    os.kill(os.getpid(), signal.SIGINT)


def test_a_held_ctrl_c_is_raised_when_the_work_ends_saying_what_it_kept(capfd):
    done = []
    with pytest.raises(KeyboardInterrupt, match="kept: the run") as e:
        with held("saving the run first") as h:
            ctrl_c()
            ctrl_c()
            done.append("finished")          # not cut by either
            h.message, h.run = "kept: the run", "run-object"
    assert done == ["finished"] and e.value.run == "run-object" and h.count == 2
    assert "Ctrl-C: saving the run first; then it stops (Ctrl-C 2 more time(s) to abandon " \
        "it)" in capfd.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_third_ctrl_c_abandons_the_work_at_once():
    done = []
    with pytest.raises(KeyboardInterrupt, match="3 times: the save was abandoned"):
        with held("the save"):
            ctrl_c()
            ctrl_c()
            ctrl_c()
            done.append("finished")
    assert done == []


def test_not_holding_raises_the_first_and_holds_the_next():
    steps = []
    with pytest.raises(KeyboardInterrupt, match="said after"):
        with held("keeping the run", holding=False) as h:
            try:
                ctrl_c()
                steps.append("not reached")
            except KeyboardInterrupt:
                steps.append("first raised")
                ctrl_c()                      # held now: the handling is not cut
                steps.append("handled")
                h.message = "said after"
    assert steps == ["first raised", "handled"]


def test_a_block_inside_another_hands_its_ctrl_c_outward():
    with pytest.raises(KeyboardInterrupt, match="outer"):
        with held() as outer:
            with held() as inner:
                ctrl_c()
                inner.message = "inner"
            assert outer.count == 1
            outer.message = "outer"


def test_a_process_that_ignores_ctrl_c_keeps_ignoring_it():
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with held("x", holding=False) as h:
            ctrl_c()
        assert h.count == 0 and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)
