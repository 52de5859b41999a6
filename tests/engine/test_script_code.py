"""Exploration.code() and the script lines under it (nbtools.config.script_code): valid
Python for every kind of step, and a served model's lines have no loss or backward (the
GPU run of a deep MLP at batch 1 handed over ``loss.backward()`` for an inference model)."""
from __future__ import annotations

import pytest
import torch

from nbtools import StepConfig, Workload
from nbtools.config.script_code import script_code
from nbtools.results.exploration import Exploration

INFER = Workload(model=lambda: torch.nn.Linear(4, 4),
                 batch=lambda step, device: (torch.randn(1, 4, device=device), None))
TRAIN = Workload(model=lambda: torch.nn.Linear(4, 1),
                 batch=lambda step, device: (torch.randn(1, 4, device=device),
                                             torch.zeros(1, 1, device=device)),
                 loss=torch.nn.functional.mse_loss)


@pytest.mark.parametrize("fields", [
    dict(), dict(compile="reduce-overhead"), dict(autocast="bf16"),
    dict(autocast="bf16", autocast_scope="forward+loss"), dict(compile="default", dynamic="mark"),
])
@pytest.mark.parametrize("train", [True, False])
def test_every_variant_is_python_and_a_served_model_has_no_backward(fields, train):
    code = script_code(StepConfig(scenario="custom", **fields), changed=tuple(fields),
                       train=train)
    compile(code, "script", "exec")
    assert ("loss.backward()" in code) == train, code
    assert ("no_grad" in code) == (not train), code


def _explored(start: StepConfig, workload, **best) -> Exploration:
    return Exploration(start=start, best=start.replace(**best), workload=workload,
                       best_workload=workload, kept=[best])


def test_an_exploration_of_a_served_model_hands_over_forward_only():
    cfg = StepConfig(scenario="custom")
    served = _explored(cfg, INFER, compile="reduce-overhead").code()
    assert 'mode="reduce-overhead"' in served and "backward" not in served, served
    trained = _explored(cfg, TRAIN, compile="reduce-overhead").code()
    assert "loss.backward()" in trained
    scenario = _explored(StepConfig(scenario="tp-mlp-infer"), None, compile="default").code()
    assert "backward" not in scenario and "out = model(x)" in scenario, scenario
    assert "loss.backward()" in _explored(StepConfig(scenario="ddp-train"), None,
                                          compile="default").code()


def test_a_batch_the_exploration_grew_is_in_the_code():
    """1 x H200, session 23: explore kept batch 4 -> 256 for tp-mlp-infer and code() said
    nothing of it (batch was a measuring field, left out of the script)."""
    start = StepConfig(scenario="tp-mlp-infer", batch=4, compile="reduce-overhead")
    ex = Exploration(start=start, best=start.replace(batch=256), workload=None,
                     best_workload=None, kept=[{"batch": 8}, {"batch": 256}])
    code = ex.code()
    compile(code, "script", "exec")
    assert "# changed by the exploration: batch" in code
    assert "batch_size=256)   # changed" in code
    same = Exploration(start=start, best=start, workload=None, best_workload=None).code()
    assert "batch_size" not in same
