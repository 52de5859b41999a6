"""Each tutorial saves its runs in a history folder of its own by default (notebook 03's
panel listed 00's runs when all of them wrote to nbtools-runs)."""
from __future__ import annotations

from pathlib import Path

import nbformat
from support.paths import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _parameters(path: Path) -> dict:
    nb = nbformat.read(str(path), as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", []))
    scope: dict = {}
    exec(cell.source, {}, scope)           # the parameters cell: plain assignments
    return scope


def test_each_tutorial_keeps_its_own_history_folder():
    folders = {p.stem: _parameters(p)["HISTORY"] for p in NOTEBOOKS}
    assert len(folders) >= 7
    assert len(set(folders.values())) == len(folders), folders
    for stem, folder in folders.items():
        assert Path(folder).name == stem, (stem, folder)     # named after its notebook
        nb = nbformat.read(str(Path(NOTEBOOKS[0]).parent / f"{stem}.ipynb"), as_version=4)
        assert any("Lab(history=HISTORY" in c.source for c in nb.cells), stem


def test_view_reads_the_tutorials_folders_under_nbtools_runs(tmp_path):
    """Each tutorial saves under ../nbtools-runs/<notebook>; `view nbtools-runs` lists all of
    them (and says whose), while a Lab on one of those folders loads only its own runs."""
    import subprocess
    import sys
    from nbtools.results.history import History
    from nbtools.results.run import Run
    root = tmp_path / "nbtools-runs"
    for nb in ("00-quickstart", "03-recompiles-and-dynamic-shapes"):
        History(root / nb).add(Run(config=None, status="ok"))
    History(root).add(Run(config=None, status="ok"))          # the demo's own
    assert len(History.load(root)) == 1 and len(History.load(root / "00-quickstart")) == 1
    assert len(History.load(root, nested=True)) == 3
    r = subprocess.run([sys.executable, "-m", "nbtools", "view", str(root)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert "runs from 00-quickstart/ (1), 03-recompiles-and-dynamic-shapes/ (1) and 1 in" in r.stderr
    assert r.stdout.count("\n") >= 3
