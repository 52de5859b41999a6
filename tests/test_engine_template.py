"""Local CPU engines of a process's second and later labs are forked from one warm template
per client process and environment (lab/engine_template.py, engine/template.py): real labs
on gloo, real forks."""
from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from nbtools import Lab, StepConfig
from nbtools.lab import engine_template

pytestmark = pytest.mark.slow

RUN = StepConfig(scenario="ddp-train", size="small", warmup=1, steps=1, profiled=0)


def _parents(lab) -> set:
    return {psutil.Process(pid).ppid() for pid in lab.pool.all_pids()}


def test_a_first_lab_starts_interpreters_the_next_fork_from_one_template(monkeypatch):
    monkeypatch.setattr(engine_template, "_LABS", 0)    # as in a new process
    with Lab(n=2, history=None, spares=False) as lab:
        # a process's first lab: new interpreters, no template (most processes start one)
        assert _parents(lab) == {os.getpid()}
        assert lab.run(RUN).ok
    with Lab(n=2, history=None, spares=False) as lab:
        (first,) = _parents(lab)
        assert first in engine_template.pids()
        assert "nbtools.engine.template" in " ".join(psutil.Process(first).cmdline())
        # forked after the template imported everything: the engines import nothing more
        # (a new interpreter's imports are 3-5 s of CPU here; benchmarks/engine_fork.py)
        for eid in lab.rank_to_engine.values():
            assert lab.client[eid].apply_sync(eval, HAS_DYNAMO)
        cpu = [sum(psutil.Process(pid).cpu_times()[:2]) for pid in lab.pool.all_pids()]
        assert max(cpu) < 1.5, cpu
        assert lab.run(RUN).ok
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "another test (call)")   # volatile: same template
    with Lab(n=2, history=None, spares=False) as lab:
        assert _parents(lab) == {first}          # the same template: no new imports
        # a forked engine's death is named as a child's would be: only the template can
        # reap it, and it says how it ended
        slot = next(iter(lab.pool.slots.values()))
        os.kill(slot.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while slot.exit_status() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert slot.exit_status() == "killed by SIGKILL"


# evaluated on an engine (a function of this file would travel by reference to a module
# the engine cannot import)
HAS_DYNAMO = ("'torch._dynamo' in __import__('sys').modules "
              "and 'nbtools.engine.runner' in __import__('sys').modules")


def test_a_changed_environment_gets_a_new_template_and_the_old_one_ends(monkeypatch):
    monkeypatch.setattr(engine_template, "_LABS", 2)    # past this process's first lab
    with Lab(n=2, history=None, spares=False) as lab:
        (old,) = _parents(lab)
        monkeypatch.setenv("NBTOOLS_TEST_TEMPLATE_ENV", "changed")   # read at import, say
        with Lab(n=2, history=None, spares=False) as other:
            (new,) = _parents(other)
            assert new != old
            env = psutil.Process(next(iter(other.pool.all_pids()))).environ()
            assert env.get("NBTOOLS_TEST_TEMPLATE_ENV") == "changed"
            # the old template still has the first lab's engines: it stays to report them
            assert old in engine_template.pids()
    # both labs closed: the next template asked for ends those with no engines left
    deadline = time.monotonic() + 20
    while True:
        engine_template.template({"NBTOOLS_TEST_TEMPLATE_ENV": "third"})
        if not {old, new} & engine_template.pids() or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not {old, new} & engine_template.pids()
    assert not psutil.pid_exists(old) or psutil.Process(old).status() == psutil.STATUS_ZOMBIE


def test_fork_engines_0_starts_new_interpreters(monkeypatch):
    monkeypatch.setenv("NBTOOLS_FORK_ENGINES", "0")
    with Lab(n=2, history=None, spares=False) as lab:
        assert _parents(lab) == {os.getpid()}
        assert lab.run(RUN).ok


def test_a_template_that_cannot_fork_leaves_the_engines_to_start_anew(monkeypatch):
    monkeypatch.setattr(engine_template, "_LABS", 2)
    def broken(extra):
        raise RuntimeError("no template here")
    monkeypatch.setattr(engine_template, "template", broken)
    with Lab(n=2, history=None, spares=False) as lab:
        assert _parents(lab) == {os.getpid()}
        assert lab.run(RUN).ok
