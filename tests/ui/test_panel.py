"""The widget panel driven from Python (no browser) on a real 2-CPU-rank Lab: the same
objects a notebook click reaches, so what passes here is the panel's own logic."""
from __future__ import annotations

import dataclasses

import pytest
from jupyter_bokeh import BokehModel

from nbtools import StepConfig
from nbtools.config.step_config import ConfigError
from nbtools.widgets.panel import DEFAULT, RUNNING, Panel, config_from_values, values_from_config

from support.lab_steps import SMALL


# -- pure: widget values <-> StepConfig ---------------------------------------------------
@pytest.mark.parametrize("cfg", [
    StepConfig(),
    StepConfig(scenario="ddp-train", compile="default", backend="aot_eager",
               ddp_wrap="compile-outside", batch=4, check=True),
    StepConfig(scenario="varlen-train", parallel="fsdp2", seq_len=64, seq_schedule="bucketed",
               compile="max-autotune-no-cudagraphs", dynamic="mark", autocast="bf16",
               autocast_scope="step", cache="continue", size="small", seed=3, warmup=0,
               steps=1, profiled=0, capture="light", torch_trace=True),
], ids=["defaults", "ddp", "varlen"])
def test_values_round_trip(cfg):
    values = values_from_config(cfg)
    assert set(values) == {f.name for f in dataclasses.fields(StepConfig)}
    assert config_from_values(values) == cfg


def test_every_field_has_a_control_for_each_of_its_values():
    """Without a lab (the fast tier): every StepConfig field is in one group and its control
    takes each value the field accepts (a new str field once got a number box)."""
    from nbtools.config.step_config import FIELD_CHOICES
    from nbtools.widgets.panel import CHOICES, GROUPS
    from nbtools.widgets.panel_parts import control
    grouped = [name for _, names in GROUPS for name in names]
    fields = {f.name for f in dataclasses.fields(StepConfig)}
    assert sorted(grouped) == sorted(fields)
    defaults = values_from_config(StepConfig())
    for name in fields:
        if FIELD_CHOICES.get(name):
            assert set(FIELD_CHOICES[name]) <= set(CHOICES[name]), name
        for value in CHOICES.get(name, (defaults[name],)):
            assert control(name, value, CHOICES).value == value, (name, value)


def test_none_fields_have_widget_values():
    v = values_from_config(StepConfig())
    # one word for every default, as on the command line (and in the export)
    assert v["parallel"] == v["seq_schedule"] == v["batch"] == v["seq_len"] == DEFAULT == "default"
    cfg = config_from_values(dict(v, parallel="none", batch="2"))
    assert cfg.parallel == "none" and cfg.batch == 2 and cfg.seq_len is None
    with pytest.raises(ConfigError, match="batch='two': give a whole number, or 'default'"):
        config_from_values(dict(v, batch="two"))


def test_refused_choices_are_found_with_the_labs_reason():
    """What the panel marks: each choice lab.run would refuse with the others as they are,
    and the reason (the same checks: the config's, the device's)."""
    from nbtools.config.workload import check_run
    from nbtools.widgets.panel import CHOICES
    from nbtools.widgets.panel_checks import refusals

    def check(values):
        try:
            check_run(None, config_from_values(values), "cpu")
        except ConfigError as e:
            return str(e)
        return ""
    got = refusals(values_from_config(StepConfig(scenario="tp-mlp-infer")), check, CHOICES)
    assert "is not supported by scenario 'tp-mlp-infer'" in got["parallel"]["ddp"]
    assert "needs CUDA" in got["cudagraph"]["manual"]
    assert "compile='off'" in got["fullgraph"][True]
    assert "tp" not in got["parallel"] and "compile" not in got     # every mode runs here


def test_invalid_values_raise_config_error():
    with pytest.raises(ConfigError, match="backend"):
        config_from_values(dict(values_from_config(StepConfig()), backend="aot_eager"))
    with pytest.raises(ConfigError, match="unknown StepConfig field"):
        config_from_values({"colour": "red"})


# -- the panel on a real lab ----------------------------------------------------------------
# the conftest lab, with what this module needs beside its defaults
LAB = dict(history=None)


@pytest.fixture(scope="module")
def panel(lab, tmp_path_factory):
    return Panel(lab, StepConfig(scenario="tp-mlp-infer", **SMALL),
                 export_path=tmp_path_factory.mktemp("export") / "findings.html")


def _lanes(panel):
    return {lane.split(" ")[0] for lane in panel.timeline.decode()["lane"]}


def test_every_field_has_a_control(panel):
    assert set(panel.controls) == {f.name for f in dataclasses.fields(StepConfig)}
    assert panel.config() == StepConfig(scenario="tp-mlp-infer", **SMALL)
    assert panel.widget.panel is panel


def test_run_button_updates_the_timeline_in_place(lab, panel, monkeypatch):
    tl, view = panel.timeline, panel.timeline_view
    sources = (tl.events_source, tl.steps_source, tl.compile_source, tl.summary_source)
    figure, bundle = tl.figure, view.render_bundle
    statuses, sent = [], []
    panel.status.observe(lambda c: statuses.append(c["new"]), "value")
    monkeypatch.setattr(view, "send", lambda msg, buffers=None: sent.append(msg))
    n = len(lab.history)

    panel.run_button.click()                      # eager
    assert len(lab.history) == n + 1, panel.error.value
    first = lab.history[-1]
    assert first.ok and first.config == panel.config()
    assert _lanes(panel) == {"r0", "r1"}
    boxes_before = len(tl.events_source.data["left"])

    panel.controls["compile"].value = "default"   # then a compiled step
    panel.controls["backend"].value = "aot_eager"
    panel.run_button.click()
    assert len(lab.history) == n + 2, panel.error.value
    run = lab.history[-1]
    assert run.ok, run.errors
    assert run.config == panel.config()
    assert (run.config.compile, run.config.backend) == ("default", "aot_eager")
    assert run.config == StepConfig(scenario="tp-mlp-infer", compile="default",
                                    backend="aot_eager", **SMALL)
    assert (run.summary["compiles"] >= 1).all()

    # the same models, new data: nothing rebuilt, the live view was patched, not re-rendered
    assert (tl.events_source, tl.steps_source, tl.compile_source, tl.summary_source) == sources
    assert all(a is b for a, b in zip(sources, (tl.events_source, tl.steps_source,
                                                tl.compile_source, tl.summary_source)))
    assert tl.figure is figure and panel.timeline_view is view and view.render_bundle is bundle
    assert any(m.get("msg") == "patch" for m in sent)
    # the sources hold this run's events, for both ranks
    assert _lanes(panel) == {"r0", "r1"}
    assert tl.stats["events"] == len(run.events) > 0
    assert sorted(set(run.events["rank"])) == [0, 1]
    assert run.run_id in tl.figure.title.text and first.run_id not in tl.figure.title.text
    assert len(tl.compile_source.data["x"]) == len(run.compile_events) > 0
    assert len(tl.events_source.data["left"]) != boxes_before or \
        list(tl.decode()["name"]) != first.events["name"].astype(str).tolist()
    # progress while running, result after
    assert any(RUNNING in s for s in statuses), statuses
    # and where the run was: phase and step per rank (the compiled run takes seconds)
    assert any("warm-up/compile" in s and "rank 0:" in s and "rank 1:" in s
               for s in statuses), statuses
    assert run.run_id in panel.status.value and "done" in panel.status.value
    assert run.run_id in panel.summary.value and "step_ms" in panel.summary.value
    assert panel.error.value == "" and not panel.run_button.disabled
    assert panel.history_list.value == run.run_id
    assert (panel.compare_a.value, panel.compare_b.value) == (first.run_id, run.run_id)


def test_invalid_combination_shows_config_error_and_runs_nothing(lab, panel):
    n, shown = len(lab.history), panel.shown
    panel.set_config(StepConfig(scenario="tp-mlp-infer", backend="inductor", **SMALL))
    panel.controls["backend"].value = "aot_eager"          # compile is off
    panel.run_button.click()
    assert "ConfigError" in panel.error.value and "backend" in panel.error.value
    assert len(lab.history) == n and panel.shown is shown

    panel.controls["backend"].value = "inductor"
    panel.controls["cudagraph"].value = "manual"           # these ranks are CPUs
    panel.run_button.click()
    assert "ConfigError" in panel.error.value and "needs CUDA" in panel.error.value
    assert len(lab.history) == n
    # before any click: Run is disabled with the reason on hover, the choice marked
    assert panel.run_button.disabled and "needs CUDA" in panel.run_button.tooltip
    panel.controls["cudagraph"].value = "off"
    assert not panel.run_button.disabled
    labels = dict((v, k) for k, v in panel.controls["cudagraph"].options)
    assert labels["manual"] == "✗ manual" and "manual: cudagraph='manual' needs CUDA" in \
        panel.controls["cudagraph"].tooltip
    assert panel.controls["cudagraph"].value == "off"


def test_auto_rerun_on_change(lab, panel):
    n, steps = len(lab.history), SMALL["steps"] + 1        # a change from the panel's SMALL
    panel.auto.value = True
    try:
        panel.controls["steps"].value = steps
    finally:
        panel.auto.value = False
    assert len(lab.history) == n + 1, panel.error.value
    assert lab.history[-1].config.steps == steps and panel.shown is lab.history[-1]
    panel.controls["steps"].value = steps + 1  # auto is off: nothing runs
    assert len(lab.history) == n + 1


def _step_failing_on_rank1(ctx):
    import torch
    import torch.distributed as dist
    if ctx.rank == 1 and ctx.cfg.seed == 1 and ctx.step == 1:
        raise ValueError("planted failure on rank 1")
    t = torch.ones(8) * (ctx.rank + 1)
    dist.all_reduce(t)
    return t.sum()


def test_failed_rank_is_shown_and_the_panel_keeps_working(lab):
    p = Panel(lab, StepConfig(scenario="custom", warmup=0, steps=3, profiled=1, seed=1),
              step_fn=_step_failing_on_rank1)
    assert p.controls["scenario"].disabled
    n = len(lab.history)
    p.run_button.click()
    assert "RunFailed" in p.error.value
    assert "rank 1" in p.error.value and "planted failure" in p.error.value
    assert "failed" in p.status.value and not p.run_button.disabled
    assert len(lab.history) == n + 1 and not lab.history[-1].ok
    assert p.history_list.value == lab.history[-1].run_id

    p.controls["seed"].value = 0                # the next run succeeds
    p.run_button.click()
    assert p.error.value == "", p.error.value
    run = lab.history[-1]
    assert run.ok and run.config.scenario == "custom" and run.config.seed == 0
    assert p.shown is run and _lanes(p) == {"r0", "r1"}


def test_history_pick_shows_that_run(lab, panel):
    older = next(r for r in lab.history if r.ok and r.config.scenario == "tp-mlp-infer")
    panel.history_list.value = older.run_id
    assert panel.shown is older and older.run_id in panel.timeline.figure.title.text
    # the saved notebook's picture follows: this run, its config and summary
    import base64
    import io
    from PIL import Image
    saved = Image.open(io.BytesIO(base64.b64decode(panel.repicture.current())))
    text = saved.text["Description"]
    assert f"run {older.label}" in text and "config: scenario=tp-mlp-infer" in text, text
    assert "step_ms" in text and panel.widget._nbtools_picture == panel.repicture.current()
    panel.set_config(StepConfig(**SMALL))
    panel.load_button.click()
    assert panel.config() == older.config


def test_compare_two_runs(lab, panel):
    eager = next(r for r in lab.history if r.ok and r.config.scenario == "tp-mlp-infer"
                 and r.config.compile == "off")
    compiled = next(r for r in lab.history if r.ok and r.config.compile == "default")
    panel.compare_a.value, panel.compare_b.value = eager.run_id, compiled.run_id
    panel.compare_button.click()
    assert panel.error.value == "", panel.error.value
    text = panel.compare_html.value
    assert "step_ms" in text and "compile" in text and "aot_eager" in text
    assert eager.run_id in text and compiled.run_id in text
    assert "category" in text
    (view,) = panel.compare_box.children
    assert isinstance(view, BokehModel) and view is panel.compare_view


def test_compare_is_cleared_when_its_selectors_move(lab, panel):
    panel._refresh_history()
    listed = {v for _, v in panel.compare_a.options}
    ok = [r.run_id for r in lab.history if r.ok and r.run_id in listed]
    panel.compare_a.value, panel.compare_b.value = ok[0], ok[1]
    panel.compare_button.click()
    assert panel.compare_box.children and ok[0] in panel.compare_html.value
    panel.compare_b.value = ok[-1] if ok[-1] != ok[1] else ok[0]
    assert panel.compare_box.children == () and "press Compare" in panel.compare_html.value


def test_export_writes_this_panels_runs(lab, panel):
    other = lab.run(StepConfig(scenario="tp-mlp-infer", seed=9, **SMALL))   # not the panel's
    panel._refresh_history()
    assert set(panel.export_runs.value) == set(panel.mine) and other.run_id not in panel.mine
    panel.export_notes.value = "panel test"
    panel.export_button.click()
    path = panel.export_path.value
    text = open(path, encoding="utf-8").read()
    assert all(r in text for r in panel.mine) and other.run_id not in text
    assert "panel test" in text and "wrote" in panel.export_status.value
    assert f"{len(panel.mine)} runs" in panel.export_status.value
    panel.export_runs.value = tuple(r.run_id for r in lab.history)     # the whole history
    panel.export_button.click()
    assert all(r.run_id in open(path, encoding="utf-8").read() for r in lab.history)


def _step_hanging_on_rank0(ctx):
    import torch
    import torch.distributed as dist
    if ctx.cfg.seed == 2 and ctx.rank == 0:
        dist.all_reduce(torch.ones(1))          # rank 1 never joins
    return torch.zeros(())


def test_timeout_is_shown_and_the_next_run_heals_without_restart(lab):
    """A rank stuck past the timeout is named; the lab replaces its engine by itself before
    the next run, so the panel offers no Restart (it does for a closed lab, below) and the
    next Run works as it is."""
    p = Panel(lab, StepConfig(scenario="custom", warmup=0, steps=1, profiled=0, seed=2),
              step_fn=_step_hanging_on_rank0)
    timeout, lab.timeout = lab.timeout, 5
    try:
        p.run_button.click()
    finally:
        lab.timeout = timeout
    assert "RunTimeout" in p.error.value and "rank(s) [0] did not finish" in p.error.value
    assert "replaced before the next run" in p.error.value
    assert p.restart_button.layout.display == "none" and not p.run_button.disabled
    p.controls["seed"].value = 0
    p.run_button.click()
    assert p.error.value == "" and lab.history[-1].ok and p.shown is lab.history[-1]


def test_a_panel_made_after_runs_shows_its_last_run_when_displayed(lab, panel, monkeypatch):
    """Patches sent before a view exists reach no view: a panel that shows its last run at
    construction must hand the page the current figure when it is displayed (in the page
    it drew an empty 0..1 axis before)."""
    last = next(r for r in reversed(list(lab.history)) if r.ok)
    fresh = Panel(lab)
    view = fresh.timeline_view
    assert fresh.shown is last and view._patched     # updated after the widget was made
    pushed = []
    monkeypatch.setattr(view, "_send", lambda msg, buffers=None: pushed.append(msg))
    bundle = fresh.widget._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    states = [m["state"]["render_bundle"] for m in pushed if "render_bundle" in m.get("state", {})]
    assert states and last.run_id in states[-1] and not view._patched
    fresh.widget.close()


def test_closed_lab_says_so_and_restart_brings_it_back(lab):
    """Last: it closes the module's lab (the fixture's close after it is harmless)."""
    p = Panel(lab, StepConfig(scenario="tp-mlp-infer", **SMALL))
    n = len(lab.history)
    lab.close()
    p.run_button.click()
    assert "LabClosed" in p.error.value and "lab = Lab()" in p.error.value
    assert "timeout" not in p.error.value and "stuck" not in p.error.value
    assert len(lab.history) == n and p.restart_button.layout.display != "none"
    p.restart_button.click()
    assert "restarted" in p.status.value
    p.run_button.click()
    assert p.error.value == "" and len(lab.history) == n + 1 and lab.history[-1].ok
