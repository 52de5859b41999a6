"""lab.explore on a real 2-rank gloo lab: a planted slow config whose advice really makes a
difference (recompiles per length -> dynamic) is screened and kept, a slower change is
refused (dropped in its screen or resolved worse), a change whose runs fail is recorded and
skipped; a tiny budget stops before any A/B and says what it left untried; stop and Ctrl-C
(KeyboardInterrupt in the loop) return what finished; code() is Python naming the kept
change. Few steps and 2-3 rounds: the suite stays fast."""
from __future__ import annotations

import threading

import pytest

from nbtools import Exploration, StepConfig

from support.explore_steps import SLOW, WORKLOAD

pytestmark = pytest.mark.slow


LAB = "shared"     # the worker's lab (tests/conftest.py): history counted from here


def test_keeps_the_faster_change_refuses_a_slower_one_and_skips_a_failing_one(lab, capsys):
    n0 = len(lab.history)
    ex = lab.explore(WORKLOAD, SLOW, rounds=3,     # t at 2 df: 2 rounds need t(1) = 12.7
                     also=[{"backend": "aot_eager"}, {"autocast": "bf16"}])
    print(ex.steps.to_string())
    assert isinstance(ex, Exploration) and ex.start == SLOW
    rows = {r["change"]: r for r in ex.rows}
    kept = rows["dynamic='dynamic'"]
    assert kept["rule"] == "recompile-shapes" and kept["kept"] and kept["outcome"] == "kept"
    assert kept["resolved"] and kept["ratio"] < 1 and kept["high"] < 1
    assert kept["screen"].startswith("B/A ") and kept["runs"] >= 4 + 12   # screen + proof
    assert ex.best == SLOW.replace(dynamic="dynamic") and ex.kept == [{"dynamic": "dynamic"}]
    # aot_eager recompiles every length too, through AOTAutograd: slower, not kept
    slower = rows["backend='aot_eager'"]
    assert not slower["kept"] and slower["screen"]
    assert slower["outcome"].startswith(("dropped in the screen", "resolved worse",
                                         "not resolved faster")), slower["outcome"]
    failed = rows["autocast='bf16'"]
    assert failed["outcome"].startswith("failed: ") and "float32 only" in failed["outcome"]
    assert not failed["kept"] and 1 <= failed["runs"] < 8     # skipped at its first failure
    # the verdict is the keeping A/B's; every run is in the history
    assert ex.verdict == ex.comparisons[kept["ab"]].verdict and ex.verdict.good
    made = sum(r["runs"] for r in ex.rows)
    assert len(lab.history) - n0 >= 1 + made
    code = ex.code()
    compile(code, "explore-code", "exec")
    assert "dynamic=True" in code and "torch.compile(model" in code and "# changed" in code
    out = capsys.readouterr().out
    assert "explore: dynamic='dynamic'" in out and "-> kept" in out   # a line per A/B
    html = ex._repr_html_()
    assert "dynamic=&#x27;dynamic&#x27;" in html and "float32 only" in html
    fig = ex.plot().layout
    assert fig.y_range.factors[-1].startswith("1. dynamic='dynamic'")


def test_a_tiny_budget_stops_before_any_ab_and_says_over_budget(lab, capsys):
    ex = lab.explore(WORKLOAD, SLOW, budget_s=0.5, rounds=2)
    assert ex.rows and all(r["outcome"].startswith("not tried for lack of budget")
                           for r in ex.rows if r["change"] != "(in your code)")
    assert ex.comparisons == [] and ex.best == SLOW and not ex.kept
    # at most one run past the budget (a screen priced inside it may meet a slower run)
    assert sum(r["runs"] for r in ex.rows) <= 1
    # "nothing tried was resolved faster" would say an A/B was tried: none was
    assert ex.verdict.text.startswith("nothing tried: the budget (0 s) was spent before the "
                                      "first A/B (the start run took ")
    assert "dynamic='dynamic'" in ex.budget_text and "left untried" in ex.budget_text
    assert not ex.verdict.resolved
    code = ex.code()
    compile(code, "explore-code", "exec")
    assert "nothing tried was resolved faster" in code


def test_stop_and_ctrl_c_return_what_finished_and_on_step_prints_nothing(lab, capsys):
    stop, rows = threading.Event(), []

    def stop_after_first_run(ev):
        if ev["phase"] == "done":
            stop.set()
    capsys.readouterr()
    ex = lab.explore(WORKLOAD, SLOW, rounds=2, on_step=rows.append,
                     on_run=stop_after_first_run, stop=stop)
    assert capsys.readouterr().out == ""                    # on_step given: nothing printed
    assert ex.note.startswith("stopped") and not ex.kept and ex.best == SLOW
    assert rows and rows[-1]["outcome"].startswith("stopped") and not rows[-1]["kept"]

    def interrupt(ev):      # Ctrl-C arrives as KeyboardInterrupt in the main thread
        if ev["phase"] == "done" and ev["index"] == 2:
            raise KeyboardInterrupt
    ex = lab.explore(WORKLOAD, SLOW, rounds=2, on_step=lambda r: None, on_run=interrupt)
    assert ex.note.startswith("interrupted") and not ex.kept
    assert "interrupted" in ex.verdict.text and ex.start_run is not None


def test_bad_arguments_are_refused_before_any_run(lab):
    from nbtools import ConfigError
    n = len(lab.history)
    bad = (dict(budget_s=0), dict(rounds=0), dict(also=["dynamic"]), dict(start=42),
           dict(also=5), dict(also=[{"colour": 1}]), dict(start={"scenario": "ddp-train"}),
           dict(rounds="auto", max_rounds=1), dict(max_rounds=0), dict(width=-1),
           dict(timeout=-5), dict(on_run=5), dict(stop="yes"), dict(on_step=3),
           dict(equivalence=2), dict(screen="yes"), dict(rounds="many"))
    for kw in bad:
        with pytest.raises(ConfigError) as e:
            lab.explore(WORKLOAD, **kw)
        name = next(iter(kw))
        assert f"{name}=" in str(e.value) or "start" in str(e.value) or "colour" in \
            str(e.value), (kw, str(e.value))
    with pytest.raises(ConfigError, match="it is the start"):
        lab.explore(StepConfig(scenario="tp-mlp-infer"), start=StepConfig(scenario="ddp-train"))
    with pytest.raises(ConfigError, match="give a Workload"):
        lab.explore(42)
    assert len(lab.history) == n


def test_a_fix_in_an_hf_models_code_is_tried_on_the_model_itself(lab):
    """The issue's Llama: per-block compile (FSDP2) with use_cache on recompiles per
    layer_idx; the advice's fix lives in the person's code (config.use_cache = False), and
    explore tries it on their model through a model patch: B's runs no longer recompile."""
    from nbtools.models import llama
    wl = llama(batch=1, seq=8, num_hidden_layers=3, use_cache=True)
    start = StepConfig(scenario="custom", parallel="fsdp2", compile="default",
                       backend="aot_eager", fsdp_compile="per-block", warmup=1, steps=2,
                       profiled=1, reshard_after_forward=False)   # no reshard advice first
    stop = threading.Event()

    def on_step(row):                 # the patch's A/B is the point: stop after it
        if row["rule"] == "module-int-guard":
            stop.set()

    first = lab.run(wl, start)       # a person's run, then explore: its start run reuses
    ex = lab.explore(wl, start, rounds=2, on_step=on_step, stop=stop)   # first's graphs
    print(ex.steps.to_string())
    # the warm start run compiled nothing: the recompiles it rests on are first's (the GPU
    # run of benchmarks/gpu/advice_cases.py lost this advice before)
    assert ex.start_run.compiled_by == first.run_id, ex.start_run.ranks
    assert "module-int-guard" not in [s.rule for s in ex.start_run.advise()]
    row = next(r for r in ex.rows if r["rule"] == "module-int-guard")
    assert row["change"] == "model.config.use_cache=False" and row["ab"] is not None, row
    assert "B is A's model with model.config.use_cache=False set" in row["verdict"]
    assert "different workloads" not in row["verdict"]
    cmp = ex.comparisons[row["ab"]]
    assert all(r.ok for r in cmp.runs_a + cmp.runs_b)
    recompiles = [int((r.compile_events.kind == "recompile").sum()) for r in cmp.runs_b]
    assert cmp.runs_b[0].config == cmp.runs_a[0].config and recompiles[0] == 0, recompiles
    # A still recompiles per layer where it compiled anew (its first run may reuse the start
    # run's graphs: same config, same model)
    assert max(int((r.compile_events.kind == "recompile").sum()) for r in cmp.runs_a) > 0
    if row["kept"]:
        assert ex.best_workload is not wl and "model.config.use_cache = False" in ex.code()


def test_the_panels_export_holds_the_labs_explorations_and_picks_the_newest_run(lab,
                                                                               tmp_path):
    # issue 54: Export left out an exploration made by lab.explore in the notebook, and a
    # panel opened after runs of the notebook's own had no run picked
    import html

    from nbtools.widgets.panel import Panel
    ex = lab.explore(WORKLOAD, SLOW, budget_s=0.5, rounds=2)
    assert lab.explorations[-1] is ex
    panel = Panel(lab, export_path=tmp_path / "findings.html")
    newest = list(lab.history)[-1].run_id
    assert panel.export_runs.value == (newest,)
    panel.export_button.click()
    assert "wrote" in panel.export_status.value, panel.export_status.value
    text = (tmp_path / "findings.html").read_text(encoding="utf-8")
    assert "<h2>Explorations</h2>" in text and html.escape(ex.budget_text) in text
