"""lab.explore on a fresh lab (its own: the first run of the engines is cold) with a small
budget: the screens are priced from a warm run measured after the cold start, not from the
cold start run (issue 51: a 5.2-s cold start priced every screen at ~21 s, and budget_s=10
tried nothing); it ends with no more than 30 % of its budget left unless each move it left
untried costs more than what was left, and says what each would cost."""
from __future__ import annotations

import math

import pytest

from nbtools import StepConfig, Workload
from support.lab_steps import adam, many_small_layers, small_batch

pytestmark = pytest.mark.slow

LAB = dict(timeout=240, pg_timeout=120)     # a lab of its own: fresh, its first run cold


def test_a_fresh_lab_prices_from_a_warm_run_and_uses_its_budget(lab):
    import torch
    wl = Workload(model=many_small_layers, batch=small_batch, optimizer=adam,
                  loss=torch.nn.functional.mse_loss, name="many small layers")
    start = StepConfig(scenario="custom", warmup=1, steps=3, profiled=1)
    n0 = len(lab.history)
    ex = lab.explore(wl, start, budget_s=10, rounds=2, on_step=lambda r: None)
    print(ex.steps.to_string(), "\n", ex.budget_text)
    # the premise: the start run built the model on engines that had run nothing
    assert n0 == 0 and not any(r["reused"] for r in ex.start_run.ranks.values())
    assert ex.start_warm_s == ex.start_warm_s and ex.start_warm_s < ex.start_s
    assert "cold; a warm run" in ex.budget_text
    # the host rule's move (fused Adam) is tried: its screen ran
    tried = [r for r in ex.rows if r["runs"] > 0]
    assert tried and tried[0]["change"] == "optimizer_impl='fused'" and tried[0]["screen"], \
        ex.steps.to_string()
    # the budget is used: more than 30 % left only where each move left untried costs more
    left = ex.budget_s - (ex.elapsed_s - ex.uncharged_s)
    if left > 0.3 * ex.budget_s:
        assert all(u["cost_s"] > left for u in ex.left_untried), (left, ex.left_untried)
    # compile='default' compiles, nothing has on this lab: priced with the 30-s prior, it
    # cannot fit the budget, and the exploration says so with its price
    u = {x["change"]: x for x in ex.left_untried}
    assert "compile='default'" in u and u["compile='default'"]["cost_s"] >= 30, ex.left_untried
    assert "left untried: compile='default' (~" in repr(ex)
    assert "compile='default' (~" in ex.budget_text
    assert math.isfinite(ex.steps.set_index("change").loc["compile='default'", "cost_s"])
    assert "would cost ~" in ex._repr_html_()
