"""What the lab has seen a move do for a workload (nbtools/lab/tried.py): a run of the change
that failed, an A/B that lost or could not matter; lab.advise sets such a move aside with
the reason. Real History and Run objects; no engines (lab.advise's own path is a lab test's)."""
from __future__ import annotations

import types

import pandas as pd

from nbtools import History, StepConfig
from nbtools.analysis.advice import advise, change_key
from nbtools.lab import tried
from nbtools.results.run import Run

START = StepConfig(scenario="custom", compile="off")


def _lab(*runs):
    h = History()
    for r in runs:
        h.add(r)
    return types.SimpleNamespace(history=h)


def _run(cfg, name="net", ok=True, error=""):
    return Run(config=cfg, env={"workload": name}, status="ok" if ok else "failed",
               errors={0: error} if error else {},
               summary=pd.DataFrame([dict(rank=0, device="cpu", step_ms=1.0)]))


def test_a_failed_run_of_a_change_is_remembered_for_that_workload_only():
    start = _run(START)
    failed = _run(START.replace(compile="default"), ok=False,
                  error="Traceback...\nRuntimeError: inductor: no C++ compiler")
    other = _run(START.replace(compile="max-autotune"), name="another model", ok=False,
                 error="RuntimeError: nope")
    lab = _lab(start, failed, other)
    seen = tried.seen_for(lab, start)
    key = ((("compile", "'default'"),), ())
    assert seen == {key: f"run #{failed.run_id} with this change failed: RuntimeError: "
                         "inductor: no C++ compiler"}
    # the eager rule proposes exactly that change: advise sets it aside, saying why
    advice = advise(start, seen=seen)
    assert "eager" not in [s.rule for s in advice]
    assert "no C++ compiler" in str(advice) and "skipped: Compile the model" in str(advice)


def test_a_lost_ab_is_remembered_from_that_config_not_from_another():
    start = _run(START)
    lab = _lab(start)
    s = advise(start)[0]
    tried.remember(lab, types.SimpleNamespace(name="net"), START, s,
                   "an A/B read B is 1.20x slower (1.05-1.37, 6 rounds)")
    assert tried.seen_for(lab, start) == {change_key(s): "an A/B read B is 1.20x slower "
                                                         "(1.05-1.37, 6 rounds)"}
    # measuring fields do not make another config; another base does
    assert tried.seen_for(lab, _run(START.replace(steps=50))) == tried.seen_for(lab, start)
    assert tried.seen_for(lab, _run(START.replace(autocast="bf16"))) == {}
