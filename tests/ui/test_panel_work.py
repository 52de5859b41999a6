"""The panel does one thing at a time and says so where it was asked (issue 44), driven from
Python on a real 2-CPU-rank lab: while Compare's rounds run every other action is disabled
and a call says why beside its own buttons; a new Compare clears the last verdict at once;
Export's error lands beside Export; a panel preset to a config opens on that config's run
(or says it has not run); the saved picture carries the comparison with its table whole."""
from __future__ import annotations

import base64
import io

from nbtools import StepConfig
from nbtools.widgets.panel import Panel

from support.lab_steps import SMALL
from support.panel import two_runs

LAB = "shared"     # the worker's lab (tests/conftest.py)
A = StepConfig(scenario="tp-mlp-infer", **SMALL)


def _plain(widget) -> str:
    import html
    import re
    return html.unescape(re.sub(r"<[^>]+>", "", widget.value))


def ones_step(ctx):
    import torch
    return torch.ones(2).sum()


def twos_step(ctx):
    import torch
    return torch.full((2,), 2.0).sum()


def test_a_panel_preset_to_a_config_opens_on_that_configs_run(lab):
    """issue 44: lab.panel(cfg) showed the newest run of any config, with its flags, and
    Suggest and Try then worked from it."""
    older = lab.run(A.replace(seed=5))
    lab.run(A.replace(seed=6))                     # the newest run, another config
    p = Panel(lab, A.replace(seed=5))
    assert p.shown is older and older.run_id in p.summary.value
    assert f"#{older.run_id}, the newest run of this config" in p.status.value
    assert p.values()["seed"] == 5
    fresh = Panel(lab, A.replace(seed=7))          # never run here
    assert fresh.shown is None
    said = _plain(fresh.summary)
    assert "seed=7" in said and "has not run yet" in said, said
    assert fresh.advisor.suggest() is None        # nothing of another config to read
    assert "Suggest reads the run on screen" in _plain(fresh.advisor.progress)
    # a step of one's own: the same config run by another step is not this step's run
    cfg = StepConfig(scenario="custom", **SMALL)
    mine = lab.run(ones_step, cfg)
    assert Panel(lab, cfg, step_fn=ones_step).shown is mine
    assert Panel(lab, cfg, step_fn=twos_step).shown is None
    # not preset: the newest run, whatever its config
    assert Panel(lab).shown is mine


def test_one_thing_at_a_time_said_beside_the_button(lab, tmp_path):
    """issue 44: Suggest, Explore and Export stayed enabled during Compare and did nothing;
    Export's error appeared in the error box at the panel's top."""
    p = Panel(lab, A)
    a, b = two_runs(lab, p)
    assert p.compare() is not None and "verdict" in p.compare_html.value
    p.compare_rounds.value = 2
    p.comparer.compare(wait=False)
    # at once: the last verdict is gone and the line says what runs
    assert p.compare_html.value == "" and p.comparer.shown is None
    assert "Compare: round 1 of 2" in _plain(p.comparer.progress)
    held = p.work.widgets()
    assert all(w.disabled for w in held), [w.description for w in held if not w.disabled]
    assert p.comparer.stop_button.layout.display != "none"
    n = len(lab.history)
    assert p.advisor.suggest() is None and p.advisor.explore(wait=True) is None
    assert "Explore: not now, Compare is running" in _plain(p.advisor.progress)
    assert p.export() is None and "Export: not now, Compare is running" in _plain(p.export_status)
    assert p.run() is None and "Run: not now, Compare is running" in _plain(p.status)
    assert p.error.value == ""
    p.comparer.wait()
    assert "2 of 2 rounds compared" in p.comparer.progress.value
    assert len(lab.history) == n + 8          # the rounds' runs, nothing else ran
    assert not any(w.disabled for w in held if w is not p.advisor.try_button)
    assert p.advisor.try_button.disabled       # nothing suggested yet: nothing to try
    # Export's error beside Export, the error box above untouched
    (tmp_path / "a-file").write_text("")
    p.export_path.value = str(tmp_path / "a-file" / "report.html")
    assert p.export() is None
    said = _plain(p.export_status)
    assert "not written" in said and "a-file is a file, not a folder" in said, said
    assert p.error.value == ""


def test_the_replace_box_is_the_panels_force_and_lasts_one_write(lab, tmp_path):
    """Export and Save Perfetto refuse a file nbtools did not write, as export_html and
    to_perfetto do; the panel cannot pass force=True, so its refusal names its own "replace"
    box, which arms one write and is off again after it."""
    p = Panel(lab, A)
    p.run()
    p.export_runs.value = (p.shown.run_id,)
    mine = tmp_path / "notes.html"
    mine.write_text("<p>my notes</p>")
    p.export_path.value = str(mine)
    for act in (p.export, p.save_perfetto):
        target = mine if act == p.export else mine.with_suffix(".perfetto.json")
        target.write_text("<p>my notes</p>" if act == p.export else '{"mine": 1}')
        assert act() is None
        said = _plain(p.export_status)
        assert "not written" in said and 'tick "replace" beside the path' in said, said
        assert "force" not in said and target.read_text() in ("<p>my notes</p>", '{"mine": 1}')
        p.export_replace.value = True
        assert act() == target and "wrote" in _plain(p.export_status)
        assert p.export_replace.value is False and target.stat().st_size > 1000
        assert act() == target           # its own file now: replaced without the box


def test_the_saved_picture_holds_the_comparison_and_its_table_whole(lab):
    """issue 44: the saved picture of the panel dropped its Compare results."""
    from PIL import Image
    from nbtools.ui.picture import _font
    p = Panel(lab, A)
    a, b = two_runs(lab, p)
    cmp = p.compare()
    img = Image.open(io.BytesIO(base64.b64decode(p.repicture.current())))
    text = img.info["Description"]
    assert f"compare: A {a.label} vs B {b.label}" in text
    assert f"verdict (step_ms, B over A, 95 % interval): {cmp.verdict.text}" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("step_ms  ")]
    assert rows, text
    # the widest row of the comparison's table fits the picture
    font = _font()
    widest = max(sum(font.getlength(c) for c in ln.split("  ")) + 14 * ln.count("  ")
                 for ln in text.splitlines() if ln.count("  ") >= 5)
    assert img.width >= widest + 16, (img.width, widest)
    # the pair moved: the picture no longer claims a verdict for it
    p.compare_b.value = p.compare_a.value
    img = Image.open(io.BytesIO(base64.b64decode(p.repicture.current())))
    assert "compare: A" not in img.info["Description"]
