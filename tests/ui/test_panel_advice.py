"""The panel's Suggest / Try / Explore clicked through the widget objects on a real 2-rank
gloo lab: the advice for the run on screen with its evidence, the chosen suggestion run as
an A/B with its verdict in the panel, the exploration's table and code in the panel, and
nothing on stdout or stderr (in JupyterLab: the Log Console)."""
from __future__ import annotations

import pytest

from nbtools.widgets.panel import Panel

from support.explore_steps import SLOW, WORKLOAD

pytestmark = pytest.mark.slow


# the conftest lab, with what this module needs beside its defaults
LAB = "shared"     # the worker's lab (tests/conftest.py): history counted from here


def test_suggest_try_and_explore_land_in_the_panel_and_print_nothing(lab, capfd, tmp_path):
    panel = Panel(lab, SLOW, step_fn=WORKLOAD)
    assert panel.run() is not None and panel.shown.ok, panel.error.value
    capfd.readouterr()
    adv = panel.advisor
    adv.suggest_button.click()
    assert "dynamic=&#x27;dynamic&#x27;" in adv.advice.value and "recompile(s)" in adv.advice.value
    said = adv.advice.value           # why the step takes its time, before the moves
    assert said.index("went to") < said.index("dynamic=&#x27;dynamic&#x27;"), said
    assert adv.pick.options and not adv.try_button.disabled
    adv.rounds.value = 2
    adv.try_button.click()                      # returns at once: the A/B runs in a thread
    assert adv.explore_button.disabled and panel.run_button.disabled, adv.result.value
    assert adv.stop_button.layout.display != "none"
    adv.wait()
    assert "verdict" in adv.result.value and "dynamic" in adv.result.value, adv.result.value
    assert panel.comparison is adv.comparison and adv.comparison.rounds == 2
    adv.budget.value = 1                        # the start run alone is over it: no A/B
    adv.explore_button.click()
    adv.wait()
    res = adv.result.value
    assert "nbtools-steps" in res and "lack of budget" in res and "as code" in res, res
    assert panel.exploration is adv.exploration and adv.exploration.rows
    # the saved picture carries what the advice part shows (issue 44: it dropped it)
    import base64
    import io
    from PIL import Image
    text = Image.open(io.BytesIO(base64.b64decode(panel.repicture.current()))).info["Description"]
    assert f"explore from {adv.exploration.start.label()}" in text, text[-2000:]
    assert "lack of budget" in text and "the winner as code for your script:" in text
    panel.export_path.value = str(tmp_path / "f.html")
    panel.export_runs.value = tuple(v for _, v in panel.export_runs.options)[:1]
    assert panel.export() is not None
    page = (tmp_path / "f.html").read_text()
    assert "Explorations" in page and "lack of budget" in page
    got = capfd.readouterr()
    assert got.out == "" and got.err == "", (got.out[-500:], got.err[-500:])
