"""with_model_patch: how lab.explore tries a fix in the person's model (HF's
config.use_cache) without their editing it. The factory runs here, as on an engine."""
from __future__ import annotations

import pickle
from types import SimpleNamespace

import cloudpickle
import pytest

from nbtools import ConfigError, Workload
from nbtools.config.workload import patch_text, with_model_patch


def _model():
    return SimpleNamespace(config=SimpleNamespace(use_cache=True), layers=[1, 2])


def _batch(step, device):
    return (step,), None


def test_the_patch_is_set_on_the_built_model_and_travels_by_value():
    w = Workload(model=_model, batch=_batch, name="mine")
    p = with_model_patch(w, {"config.use_cache": False})
    assert p.name == "mine + model.config.use_cache=False" and w.model().config.use_cache
    again = pickle.loads(cloudpickle.dumps(p))          # as it crosses to the engines
    assert again.model().config.use_cache is False
    assert patch_text({"config.use_cache": False}) == "model.config.use_cache=False"


def test_a_patch_the_model_cannot_take_is_an_error_naming_it():
    p = with_model_patch(Workload(model=_model, batch=_batch), {"config.use_kv": False})
    with pytest.raises(AttributeError, match="has no attribute 'use_kv'; this fix does not "
                                             "apply to this model"):
        p.model()
    with pytest.raises(ConfigError, match="needs a Workload"):
        with_model_patch(lambda ctx: 0, {"config.use_cache": False})
    with pytest.raises(ConfigError, match="attribute.path"):
        with_model_patch(Workload(model=_model, batch=_batch), {})
