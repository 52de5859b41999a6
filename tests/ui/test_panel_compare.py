"""The panel's Compare with rounds, driven from Python on a real 2-CPU-rank Lab: the button
starts the rounds in a background thread (the kernel stays free for Stop), progress and
failed runs show in the panel, the verdict lands in the panel every time (twice in a row
on the same pair included), and nothing reaches stdout or stderr (in JupyterLab that is
the Log Console)."""
from __future__ import annotations

import html
import re
import time
from pathlib import Path


from nbtools import StepConfig
from nbtools.widgets.panel import Panel

from support.lab_steps import SMALL
from support.panel import two_runs


# the conftest lab, with what this module needs beside its defaults
LAB = "shared"     # the worker's lab (tests/conftest.py): history counted from here


def _wait_for(cond, what: str, limit_s: float = 300):
    """Until ``cond()`` (a wait, not a timing assertion: the limit only ends a hang)."""
    deadline = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.1)


def test_compare_twice_on_the_same_pair_shows_the_verdict_and_prints_nothing(lab, capfd):
    panel = Panel(lab, StepConfig(scenario="tp-mlp-infer", **SMALL))
    a, b = two_runs(lab, panel)
    panel.compare_rounds.value = 2
    capfd.readouterr()
    progress, disabled = [], []
    panel.comparer.progress.observe(lambda c: progress.append(c["new"]), "value")
    panel.compare_button.observe(lambda c: disabled.append(c["new"]), "disabled")
    for k in range(2):
        n = len(lab.history)
        panel.compare_button.click()             # returns at once: the rounds run in a thread
        assert panel.compare_button.disabled and panel.run_button.disabled
        assert panel.compare_a.disabled and panel.compare_b.disabled
        assert panel.comparer.stop_button.layout.display != "none"
        assert panel.run() is None               # no second run while the rounds run
        panel.comparer.wait()
        cmp = panel.comparison
        assert panel.error.value == "", panel.error.value
        assert cmp is not None and cmp.rounds == 2 and len(lab.history) == n + 8, k
        text = panel.compare_html.value
        assert html.escape(cmp.verdict.text) in text and "A or B changed" not in text, k
        assert (panel.compare_a.value, panel.compare_b.value) == (a.run_id, b.run_id)
        assert panel.compared == (a.run_id, b.run_id) and len(panel.compare_box.children) == 1
        assert not panel.compare_button.disabled and not panel.run_button.disabled
        assert not panel.compare_a.disabled and not panel.compare_rounds.disabled
        assert panel.comparer.stop_button.layout.display == "none"
        assert "2 of 2 rounds compared (8 runs)" in panel.comparer.progress.value
    # progress said where the rounds were: every run as it started (round k of n, which
    # side; shown at once, however short the run), and the run's phase (sampled twice a second)
    seen = " ".join(progress)
    for needle in ["Compare: round 1 of 2 · A (run 1 of 8)", "round 2 of 2 · B"] + [
            f"(run {i} of 8)" for i in range(1, 9)]:
        assert needle in seen, needle
    assert re.search(r"run \w{8}: (warm-up|measured|profiled|parse|done)", seen), seen[-2000:]
    assert disabled.count(True) == 2 and disabled.count(False) == 2
    out, err = capfd.readouterr()
    assert out == "" and "round" not in err and "VBox" not in err, (out, err)
    panel.widget.close()


def test_stop_ends_the_rounds_and_keeps_the_finished_ones(lab, capfd):
    panel = Panel(lab, StepConfig(scenario="tp-mlp-infer", **SMALL))
    two_runs(lab, panel)
    panel.compare_rounds.value = 5
    n = len(lab.history)
    capfd.readouterr()
    panel.compare_button.click()
    _wait_for(lambda: len(lab.history) >= n + 5, "the first round and a run of the second")
    panel.comparer.stop_button.click()
    assert panel.comparer.stop_button.disabled       # says it stops after this run
    panel.comparer.wait()
    cmp = panel.comparison
    assert cmp is not None and 1 <= cmp.verdict.rounds < 5
    assert "stopped after" in cmp.verdict.text
    assert html.escape(cmp.verdict.text) in panel.compare_html.value
    assert panel.comparer.progress.value.startswith("stopped: ")
    assert len(lab.history) < n + 20 and not panel.run_button.disabled
    out, _ = capfd.readouterr()
    assert out == ""
    panel.widget.close()


def _failing_once(folder: str):
    """A step that fails on every rank (before any collective) while its rank's marker
    file is in ``folder``; the marker goes with the failure."""
    def step(ctx):
        import torch
        import torch.distributed as dist
        armed = Path(folder) / f"armed-{ctx.rank}"
        if ctx.step == 0:
            print(f"step of seed {ctx.cfg.seed}")   # engine output: the lab echoes it
        if ctx.cfg.seed == 1 and armed.exists():
            armed.unlink()
            raise ValueError("planted failure in a round")
        t = torch.ones(8) * (ctx.rank + 1)
        dist.all_reduce(t)
        return t.sum()
    return step


def test_a_failed_run_in_the_rounds_is_shown_in_the_panel(lab, tmp_path, capfd):
    panel = Panel(lab, StepConfig(scenario="custom", warmup=0, steps=3, profiled=1),
                  step_fn=_failing_once(str(tmp_path)))
    two_runs(lab, panel)
    for r in (0, 1):
        (tmp_path / f"armed-{r}").touch()      # B's first run in the rounds fails
    panel.compare_rounds.value = 2
    capfd.readouterr()
    panel.compare_button.click()
    panel.comparer.wait()
    failed = panel.comparer.failures.value
    assert "round 1: B run #" in failed and "planted failure in a round" in failed, failed
    cmp = panel.comparison
    assert cmp is not None and html.escape(cmp.verdict.text) in panel.compare_html.value
    # the engines' output reached the panel's engine-output box, not stdout
    logged = "".join(o.get("text", "") for o in panel.log.outputs)
    assert "[rank 1] step of seed 1" in logged, logged
    out, _ = capfd.readouterr()
    assert out == "", out
    panel.widget.close()
