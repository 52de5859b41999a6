"""Each tutorial saves its runs in a history folder of its own by default (notebook 03's
panel listed 00's runs when all of them wrote to nbtools-runs)."""
from __future__ import annotations

from pathlib import Path

import nbformat

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


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
