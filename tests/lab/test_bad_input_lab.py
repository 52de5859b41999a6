"""Bad input loses nothing (issue 27), the cases that need real engines: 2 CPU ranks on gloo.
A run with odd text is kept and saved; a NaN result is flagged; a Workload's wrong batch or
loss is named as such; lab.run's arguments are refused before dispatch."""
from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from nbtools import ConfigError, StepConfig, Workload
from nbtools.lab.lab import RunFailed
from nbtools.results.history import History

FAST = dict(scenario="custom", warmup=0, steps=1, profiled=0)


# the conftest lab, with what this module needs beside its defaults
LAB = dict(timeout=300, pg_timeout=300, echo=False)


def _odd_report(ctx):
    import torch
    ctx.report(path="/data/\udcff.bin", **{"k\ud800": 1.0})
    return torch.tensor(1.0)


def test_a_surrogate_in_a_report_keeps_the_run(lab):
    """lab.run raised UnicodeEncodeError building the reports table: the finished run was in
    neither lab.history nor on disk."""
    run = lab.run(_odd_report, StepConfig(**FAST))
    assert run.ok and lab.history[run.run_id] is run
    assert set(run.reports["path"]) == {"/data/?.bin"}
    again = History.load(lab.history.folder)[run.run_id]
    assert set(again.reports["path"]) == {"/data/?.bin"}


def _nan_step(ctx):
    import torch
    return torch.tensor(float("nan"))


def test_a_nan_result_is_flagged(lab):
    run = lab.run(_nan_step, StepConfig(**FAST))
    assert any("not a finite number" in f for f in run.flags), run.flags
    ok = lab.run(lambda ctx: __import__("torch").tensor(2.0), StepConfig(**FAST))
    assert not any("not a finite number" in f for f in ok.flags), ok.flags


def _profiler_fails_as_it_stops(ctx):
    """On rank 0's profiled step, the profiler's stop raises as Kineto's failed allocation
    did in CI (``MemoryError: std::bad_alloc`` from _disable_profiler): the real stop runs
    first, so the process is left as after that failure, with no profiler on."""
    import torch
    import torch.autograd.profiler as ap
    if ctx.rank == 0 and ap._is_profiler_enabled and not getattr(ap, "_nbtools_failing", 0):
        real = ap._disable_profiler

        def failing():
            ap._disable_profiler, ap._nbtools_failing = real, 0
            real()
            raise MemoryError("std::bad_alloc")
        ap._disable_profiler, ap._nbtools_failing = failing, 1
    return torch.tensor(1.0)


def test_a_profiler_that_fails_as_it_stops_keeps_the_run_and_says_so(lab):
    """CI saw a run fail on 'rank 0: MemoryError: std::bad_alloc' raised by the profiler's
    stop after every step had run and been timed: the run was lost. Now it is kept: its
    steps, rank 1's timeline, and a flag that names the rank and the error."""
    run = lab.run(_profiler_fails_as_it_stops, StepConfig(warmup=1, steps=2, profiled=1))
    assert run.ok, run.first_error()
    assert sorted(run.steps["rank"].unique()) == [0, 1]
    assert len(run.steps[run.steps["rank"] == 0]) == 4          # warm-up, 2 measured, profiled
    assert set(run.events["rank"].unique()) == {1}, "rank 0 has no events; rank 1 has its own"
    lost = [f for f in run.flags if "the profiler failed" in f]
    assert lost == ["rank(s) 0: the profiler failed while it stopped (MemoryError: "
                    "std::bad_alloc): no timeline from them; their step times are kept"], run.flags
    assert run.ranks[0]["profile_lost"] == "MemoryError: std::bad_alloc"
    # the engine's profiler is off again: the next profiled run has both ranks' events
    again = lab.run(lambda ctx: __import__("torch").tensor(1.0),
                    StepConfig(warmup=1, steps=2, profiled=1))
    assert again.ok and set(again.events["rank"].unique()) == {0, 1}
    assert not any("the profiler failed" in f for f in again.flags), again.flags


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 1)

    def forward(self, x):
        return self.lin(x)


def _list_batch(step, device):
    return [[0.0] * 8] * 4, torch.zeros(4, 1)


def _batch(step, device):
    return torch.randn(4, 8), torch.randn(4, 1)


def _per_element_loss(out, target):
    return F.mse_loss(out, target, reduction="none")


@pytest.mark.parametrize("wl, words", [
    (Workload(model=Net, batch=_list_batch, loss=F.mse_loss), "Workload.batch's inputs"),
    (Workload(model=Net, batch=_batch, loss=_per_element_loss), "Workload.loss returned"),
    (Workload(model=Net, batch=_batch, loss=lambda out, t: F.cross_entropy(out, t.long()[:1])),
     "Workload.loss(output, target) failed"),
], ids=["batch not tensors", "loss not a scalar", "loss raises"])
def test_a_workload_error_names_batch_or_loss(lab, wl, words):
    with pytest.raises(RunFailed) as e:
        lab.run(wl, StepConfig(warmup=0, steps=1, profiled=0))
    assert words in str(e.value), str(e.value)
    assert lab.history[e.value.run.run_id].status == "failed"


def test_run_arguments_are_refused_before_dispatch(lab):
    n = len(lab.history)
    with pytest.raises(ConfigError, match="lab.ab"):
        lab.run(StepConfig(**FAST), StepConfig(**FAST, batch=4))
    for bad in ("10", 0, float("nan"), -1):
        with pytest.raises(ConfigError, match="timeout="):
            lab.run(lambda ctx: None, StepConfig(**FAST), timeout=bad)
    assert len(lab.history) == n     # nothing ran, nothing was swapped
    assert lab.run(lambda ctx: None, StepConfig(**FAST), timeout=60).ok


def test_a_history_folder_lost_mid_session_keeps_the_run(lab, tmp_path):
    folder = lab.history.folder
    saved = tmp_path / "saved"
    shutil.move(str(folder), saved)
    folder.write_text("replaced by a file")
    try:
        with pytest.warns(RuntimeWarning, match="kept in memory"):
            run = lab.run(lambda ctx: None, StepConfig(**FAST))
        assert run.ok and lab.history[run.run_id] is run
    finally:
        folder.unlink()
        shutil.move(str(saved), folder)
