"""Every tutorial notebook runs top to bottom, headless, on 2 CPU ranks at small sizes; the
quickstart also exports to one offline HTML file.

A notebook added to notebooks/ is covered automatically. Each one has a cell tagged
``parameters``; SMALL below overrides it (names a notebook does not use are harmless).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from nbtools.report.notebook import NotebookStopped, execute, export_notebook
from support.notebooks import cell_errors, failed_runs, small, tiny_notebook
from support.paths import NOTEBOOKS

pytestmark = pytest.mark.slow   # runs the tutorial notebooks in kernels, each with its own lab

PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))


def test_notebooks_exist_and_are_committed_clean():
    import nbformat
    assert PATHS, f"no notebooks in {NOTEBOOKS}"
    for path in PATHS:
        nb = nbformat.read(str(path), as_version=4)
        assert nb.metadata["kernelspec"]["name"] == "torch-nbtools", path.name
        tagged = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
        assert len(tagged) == 1, f"{path.name}: one cell tagged 'parameters'"
        for c in nb.cells:
            if c.cell_type == "code":
                assert not c.outputs and c.execution_count is None, f"{path.name}: outputs committed"
        # the reader keeps toggling where the text stops: the last code cell is the panel,
        # preset to what the notebook studied; closing the lab is left to the reader
        last = [c for c in nb.cells if c.cell_type == "code"][-1]
        assert last.source.startswith("lab.panel(") and last.source != "lab.panel()", path.name
        assert "lab.close()" in nb.cells[-1].source, f"{path.name}: say how to close the lab"
        # only what a clone or an installed package has
        text = "".join(c.source for c in nb.cells)
        assert "shared/" not in text and "](../" not in text, path.name


# 00 runs in test_quickstart_exports_offline_html (an export executes it and stops on a
# failing cell), 01 in JupyterLab (test_jupyterlab's run-all, with the same checks on the
# notebook it saves): once each is enough on 2 cores
HEADLESS = [p for p in PATHS if p.stem not in ("00-quickstart", "01-cuda-graphs-tp-inference")]


@pytest.mark.timeout(420)
@pytest.mark.parametrize("path", HEADLESS, ids=[p.stem for p in HEADLESS])
def test_notebook_runs_headless(path, tmp_path):
    try:
        nb = execute(path, parameters=small(tmp_path), timeout=300, cwd=tmp_path)
    except NotebookStopped as e:
        raise AssertionError(f"{e}\n{failed_runs(tmp_path / 'runs')}") from e
    assert not cell_errors(nb), cell_errors(nb)
    # the injected HISTORY was used: the runs were saved there, not into the repo
    assert any((tmp_path / "runs").glob("*/run.json")), "no run saved under HISTORY"
    if path.stem == "07-ask-the-lab":
        # issue 43.5: from an eager start on CPU ranks, the lab finds compile and keeps it
        text = _text(nb)
        assert "Compile the model (torch.compile)" in text, text
        assert re.search(r"best against start: B is [\d.]+x faster", text), text
        assert "model = torch.compile(model)   # changed" in text, text
        # issue 54: the steps as a person reads them (B / A with its interval, seconds
        # whole), not a DataFrame of raw floats (0.529214, 17.817373)
        (shown,) = [o["data"]["text/html"] for c in nb.cells for o in c.get("outputs", [])
                    if "nbtools-exploration" in (o.get("data") or {}).get("text/html", "")]
        assert "B / A (95 %)" in shown and not re.search(r"\d\.\d{5,}", shown), shown


def _text(nb) -> str:
    """Every text a notebook's cells printed or showed as plain text."""
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            out.append(o.get("text") or (o.get("data") or {}).get("text/plain") or "")
    return "\n".join(out)


@pytest.mark.timeout(420)
def test_quickstart_exports_offline_html(tmp_path, capsys):
    params = small(tmp_path)
    out = export_notebook(NOTEBOOKS / "00-quickstart.ipynb", tmp_path / "quickstart.html",
                          parameters=params, timeout=300)
    html = out.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]*\bsrc\s*=\s*['\"]?(https?:)?//", html, re.I)
    assert not re.search(r"<link[^>]*\bhref\s*=\s*['\"]?(https?:)?//", html, re.I)
    assert not re.search(r"@import\s+url\(\s*['\"]?(https?:)?//", html, re.I)
    assert "Bokeh.embed" in html or "embed_items" in html, "no static Bokeh figure"
    assert "root.Bokeh = bokeh" in html, "BokehJS is not inlined"
    assert "step_ms" in html and "exposed_comm_ms" in html, "the summary table is missing"
    assert "(interactive widget" not in html, "a figure came out as a widget placeholder"
    # the panel at the end is its static copy; each run left one progress line, no bar
    assert "nbtools-static-panel" in html and "tp-mlp-infer compile=default" in html
    assert re.search(r"run \w{8}: done in [\d.]+ s \(start [\d.]+ m?s, warm-up/compile", html)
    # and the export said where it was while it ran: per cell, and each run's phases
    err = capsys.readouterr().err
    assert re.search(r"cell \d+ \(\d+/\d+ code cells, \d+ s in\): cfg = StepConfig", err), err
    assert re.search(r"cell \d+: run \w{8}: done in", err), err
    # "0/2" as the page's text, not inside scripts (base64 data has "0/2" by chance)
    text = re.sub(r"<script[^>]*>.*?</script>", "", html, flags=re.S)
    assert "0/2" not in text and "IntProgress" not in html, "a stale progress bar was exported"
    # the notebook's own export_html wrote its findings file too, outside the repo
    assert Path(params["HTML"]).exists()
    # what test_notebook_runs_headless checks of the others: runs saved under HISTORY
    assert any((tmp_path / "runs").glob("*/run.json")), "no run saved under HISTORY"


@pytest.mark.timeout(120)
def test_export_past_its_deadline_keeps_what_ran(tmp_path):
    from nbtools.report.notebook import NotebookStopped
    nb = tiny_notebook(tmp_path / "slow.ipynb", [
        "N = 1", "print('measured', N * 21)", "import time; time.sleep(120)", "print('never')"])
    with pytest.raises(NotebookStopped) as info:
        export_notebook(nb, tmp_path / "slow.html", parameters={"N": 2}, deadline_s=15)
    assert info.value.cell_index == 3 and "deadline" in str(info.value)
    html = (tmp_path / "slow.html").read_text(encoding="utf-8")
    assert "Incomplete export" in html and "measured 42" in html
    assert not info.value.nb.cells[-1].outputs, "a cell after the deadline ran"


@pytest.mark.timeout(120)
def test_export_cli_params_and_a_failing_cell(tmp_path, capsys):
    from nbtools.cli.main import main
    nb = tiny_notebook(tmp_path / "bad.ipynb", [
        "X = 0", "print('x is', X)", "1 / X"])
    assert main(["export", str(nb), "-o", str(tmp_path / "bad.html"), "-p", "X=0"]) == 1
    err = capsys.readouterr().err
    assert "bad.ipynb stopped at cell 3" in err and "ZeroDivisionError" in err
    assert "x is 0" in (tmp_path / "bad.html").read_text(encoding="utf-8")
    assert main(["export", str(nb), "-o", str(tmp_path / "ok.html"), "-p", "X=4"]) == 0
    assert main(["export", str(nb), "-p", "X=not python"]) == 2
    assert "not a Python literal" in capsys.readouterr().err
