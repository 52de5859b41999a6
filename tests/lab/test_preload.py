"""Issue 34.8: the engines import a Workload's modules as soon as the lab sees it, so the
first run does not wait for them. What a Workload imports is found on the client without
importing it (config/imports.py); a real 2-rank CPU lab imports it in the background
(engine/preload.py), answers meanwhile, and a name that does not import breaks nothing."""
import functools
import os
import importlib
import sys
import threading
import time
import types

import pytest
import torch.nn as nn
import torch.nn.functional as F

from nbtools import ConfigError, Lab, StepConfig, Workload
from nbtools.config.imports import workload_imports
from nbtools.engine import preload as engine_preload
from nbtools.models import llama

FAST = StepConfig(scenario="custom", warmup=1, steps=1, profiled=0)


def _batch(step, device):
    import torch
    g = torch.Generator().manual_seed(step)
    return torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)


LLAMA = llama(batch=1, seq=8)


# -- what a Workload imports (client only, nothing imported) -----------------------------
def test_llama_names_transformers_model_class_not_just_the_package():
    names = workload_imports(LLAMA)
    # `from transformers import LlamaForCausalLM` inside the model function: the lazy
    # attribute is where the import's time goes, so it is named, not only "transformers"
    assert "transformers.LlamaForCausalLM" in names and "transformers.LlamaConfig" in names
    assert not any(n.split(".")[0] in ("torch", "nbtools", "functools") for n in names)


def test_notebook_lambda_closing_over_a_module_and_a_partial():
    np = importlib.import_module("numpy")       # a notebook's `import numpy as np`

    def make(width):
        import json  # noqa: F401  (standard library: never named)
        return nn.Linear(width, width)

    scale = np.float32(2.0)     # an instance: its class's module unpickles on the engines
    wl = Workload(model=functools.partial(make, 8), batch=lambda s, d: (np.zeros(3), scale),
                  loss=F.mse_loss)
    names = workload_imports(wl)
    assert "numpy" in names
    assert not any(n.split(".")[0] in ("json", "torch", "tests", "test_preload") for n in names)


def test_lazy_attribute_of_a_module_global_is_named():
    fake = types.ModuleType("lazypkg_for_test")
    fake.__file__ = "/x/site-packages/lazypkg_for_test/__init__.py"
    fake.__dir__ = lambda: ["Heavy", "light"]       # a lazy module lists what it will load
    fake.light = 1
    sys.modules["lazypkg_for_test"] = fake
    try:
        g = {"lazypkg_for_test": fake}
        model = eval("lambda: lazypkg_for_test.Heavy(lazypkg_for_test.light)", g)
        names = workload_imports(Workload(model=model, batch=_batch))
    finally:
        del sys.modules["lazypkg_for_test"]
    assert names == ("lazypkg_for_test", "lazypkg_for_test.Heavy")


def test_explicit_imports_come_first_and_bad_ones_are_refused():
    wl = Workload(model=lambda: nn.Linear(2, 2), batch=_batch,
                  imports=("transformers.models.llama.modeling_llama",))
    assert workload_imports(wl)[0] == "transformers.models.llama.modeling_llama"
    assert Workload(model=lambda: 0, batch=_batch, imports="scipy").imports == ("scipy",)
    for bad in (("not a name",), (3,), ("a..b",), 5):
        with pytest.raises(ConfigError, match="imports="):
            Workload(model=lambda: 0, batch=_batch, imports=bad)


def test_engine_importer_takes_a_name_a_module_gives_out():
    # `from collections import OrderedDict` as the engine does it (no engine needed)
    assert engine_preload.import_name("collections.OrderedDict").__name__ == "OrderedDict"
    assert engine_preload.import_name("json.decoder").__name__ == "json.decoder"
    with pytest.raises(ImportError, match="cannot import name 'Nope'"):
        engine_preload.import_name("collections.Nope")
    with pytest.raises(ModuleNotFoundError):
        engine_preload.import_name("no_such_top_module_xyz.thing")


# -- on real engines ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def mods(tmp_path_factory):
    """A folder on the engines' path with a module whose import blocks until the test
    creates ``release`` and notes each execution of it in ``execs``."""
    folder = tmp_path_factory.mktemp("mods")
    (folder / "nbt_slowmod.py").write_text(
        "import os, time\n"
        f"with open({str(folder / 'execs')!r}, 'a') as f:\n"
        "    f.write(f'{os.getpid()}\\n')\n"
        "deadline = time.monotonic() + 120\n"
        f"while not os.path.exists({str(folder / 'release')!r}) and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n")
    return folder


@pytest.fixture(scope="module")
def early():
    """Made just before the lab starts, as a notebook that defines its Workload first
    (here, not at import: a whole suite's collection makes many Workloads after it)."""
    return llama(batch=1, seq=8, name="early")


@pytest.fixture(scope="module")
def lab(mods, early):
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(mods), old) if p)
    try:
        with Lab(n=2, history=None, timeout=600, echo=False) as lab:
            lab.progress = False
            yield lab
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def _wait_for(lab, name, done=True, timeout=300.0):
    """Every rank's record of name (done, or at least started); fails after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        recs = lab.preloads()
        got = {r: next((x for x in rs if x["name"] == name), None) for r, rs in recs.items()}
        if all(x is not None and (x["ok"] is not None or not done) for x in got.values()):
            return got
        assert time.monotonic() < deadline, f"{name} not preloaded in {timeout} s: {recs}"
        time.sleep(0.2)


def _engines_have(lab, names):
    ids = list(lab.rank_to_engine.values())
    return lab.client[ids].apply_sync(engine_preload.loaded, names)


def test_lab_started_after_the_workload_imports_it_before_any_run(lab, early):
    got = _wait_for(lab, "transformers.LlamaForCausalLM")
    assert all(x["ok"] and x["seconds"] > 0 for x in got.values()), got
    assert all(h["transformers.models.llama.modeling_llama"]
               for h in _engines_have(lab, ["transformers.models.llama.modeling_llama"]))
    assert len(lab.history) == 0


def test_engine_answers_while_importing_and_the_run_waits_for_it(lab, mods):
    def model():
        import nbt_slowmod  # noqa: F401  (the run's own import: must find it done)
        return nn.Linear(8, 8)

    # made while the lab is open: the lab hears of it at once, not at lab.run
    wl = Workload(model=model, batch=_batch, loss=F.mse_loss, name="slowmod")
    started = _wait_for(lab, "nbt_slowmod", done=False)
    # the engines answered (lab.preloads() is a request to each) while the import ran
    assert all(x["ok"] is None for x in started.values()), started
    threading.Timer(1.0, (mods / "release").touch).start()
    run = lab.run(wl, FAST)
    assert run.ok
    for r in lab.rank_to_engine:
        rec = [x for x in run.ranks[r]["preload"]["imported"] if x["name"] == "nbt_slowmod"]
        assert rec and rec[0]["ok"], run.ranks[r]["preload"]
    # one import per engine: the run waited for the background one, it did not import again
    pids = (mods / "execs").read_text().split()
    assert len(pids) == len(set(pids)) == 2, pids


def test_a_module_that_does_not_exist_breaks_nothing(lab):
    wl = Workload(model=lambda: nn.Linear(8, 8), batch=_batch, loss=F.mse_loss,
                  imports=("no_such_module_for_nbtools_test",))
    got = _wait_for(lab, "no_such_module_for_nbtools_test")
    assert all(x["ok"] is False and "ModuleNotFoundError" in x["error"] for x in got.values())
    run = lab.run(wl, FAST)
    assert run.ok


def test_a_run_whose_model_needs_the_missing_module_raises_as_before(lab):
    def model():
        import no_such_module_for_nbtools_test2  # noqa: F401
        return nn.Linear(8, 8)

    wl = Workload(model=model, batch=_batch, loss=F.mse_loss)
    _wait_for(lab, "no_such_module_for_nbtools_test2")
    from nbtools import RunFailed
    with pytest.raises(RunFailed, match="no_such_module_for_nbtools_test2"):
        lab.run(wl, FAST)
    assert lab.run(LLAMA, FAST).ok     # the lab goes on (and llama's import was done)


def test_lab_preload_must_be_true_or_false():
    with pytest.raises(ConfigError, match="preload='yes'"):
        Lab(preload="yes")
