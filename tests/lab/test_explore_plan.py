"""lab.explore's plan on a real 2-rank gloo lab: a Ctrl-C (a real SIGINT in the main thread)
during the first screen returns the rows it has and lists the moves it had planned (issue
51: it returned no rows and said "the start run's advice found nothing" while the advice
held two); a bad ``also=`` value, a bad start field or a bad budget is refused before any
run (``also={'compile': 'bogus'}`` was found only after the start run, as a row)."""
from __future__ import annotations

import math
import os
import signal

import pytest

from nbtools import ConfigError, StepConfig, Workload
from support.lab_steps import adam, many_small_layers, small_batch

pytestmark = pytest.mark.slow

LAB = "shared"     # the worker's lab (tests/conftest.py): history counted from here


def _workload():
    import torch
    return Workload(model=many_small_layers, batch=small_batch, optimizer=adam,
                    loss=torch.nn.functional.mse_loss, name="many small layers (plan)")


START = StepConfig(scenario="custom", warmup=1, steps=3, profiled=1)


def test_ctrl_c_in_the_first_screen_lists_the_moves_it_had_planned(lab):
    def ctrl_c(ev):              # Ctrl-C as a person presses it: SIGINT to this process
        if ev["phase"] == "done" and ev["screen"]:
            os.kill(os.getpid(), signal.SIGINT)
    ex = lab.explore(_workload(), START, rounds=2, on_step=lambda r: None, on_run=ctrl_c)
    print(ex.steps.to_string(), "\n", ex.verdict.text)
    assert ex.note.startswith("interrupted (Ctrl-C) during the screen of ")
    # the advice's two moves (the order is its ranking): the first was in its screen
    assert sorted(ex.planned) == ["compile='default'", "optimizer_impl='fused'"], ex.planned
    first, second = ex.planned
    rows = {r["change"]: r for r in ex.rows}
    assert rows[first]["outcome"] == "interrupted: not kept (1 run(s))"
    assert rows[first]["runs"] == 1 and ex.note.endswith(f"screen of {first}")
    later = rows[second]
    assert later["outcome"] == "not tried: interrupted before its turn" and not later["kept"]
    assert math.isfinite(later["cost_s"])                # what it would have cost
    assert second in [u["change"] for u in ex.left_untried]
    assert "found nothing" not in ex.verdict.text and not ex.verdict.resolved
    assert "interrupted" in ex.verdict.text and f"planned: {first}, {second}" in \
        ex.verdict.text
    assert "left untried: " in repr(ex) and ex.best == START and not ex.kept


@pytest.mark.parametrize("kw", [
    dict(also={"compile": "bogus"}), dict(also={"steps": -1}), dict(also={"steps": None}),
    dict(also={"steps": float("nan")}), dict(also=[{"compile": "default"}, {"fullgraph": 2}]),
    dict(start={"steps": -1}), dict(start={"steps": float("nan")}), dict(start={"warmup": None}),
    dict(budget_s=float("nan")), dict(budget_s=-1), dict(budget_s="600"), dict(budget_s=True)],
    ids=lambda kw: repr(kw))
def test_a_bad_argument_is_refused_before_any_run(lab, kw):
    n = len(lab.history)
    name, value = next(iter(kw.items()))
    field = next(iter(value if isinstance(value, dict) else value[-1])) \
        if isinstance(value, (dict, list)) else name
    with pytest.raises(ConfigError) as e:
        lab.explore(_workload(), **{"start": START, "budget_s": 5, **kw})
    said = str(e.value)
    assert f"{field}=" in said and ("give" in said or "one of" in said), said
    if name == "also":
        assert said.startswith("lab.explore(also=...)"), said
    assert len(lab.history) == n                          # nothing ran
