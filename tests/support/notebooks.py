"""The tutorials at the tests' sizes: the parameters every test that runs a notebook gives
it (small enough for 2 CPU cores), and what a run notebook's outputs say went wrong."""
from __future__ import annotations

from pathlib import Path

# Small enough for a 2-core CPU: few steps, aot_eager/eager instead of inductor's C++ compile
# where the notebook lets us (claim 12 of notebook 05 is inductor's cache by definition).
SMALL = dict(SMALL=True, WARMUP=1, STEPS=2, PROFILED=1, BATCHES=[1, 4], CPU_BATCHES=[1, 4],
             MICRO=2, REPEATS=1,
             BACKEND="aot_eager", BACKENDS=["aot_eager", "eager"])


def small(tmp_path) -> dict:
    """SMALL plus output paths inside tmp_path, so a test run writes nothing into the repo."""
    return dict(SMALL, HISTORY=str(tmp_path / "runs"), HTML=str(tmp_path / "findings.html"))


def failed_runs(history: Path) -> str:
    """Each failed run's errors in full, every rank's (the cell's error names only the first
    line of the first): what a failure seen once in CI is diagnosed from."""
    from nbtools import History
    if not history.is_dir():
        return f"(no history at {history})"
    return "\n".join(f"--- run {run.run_id}, rank {r}:\n{e}"
                     for run in History.load(history) for r, e in run.errors.items())


def cell_errors(nb) -> list:
    """Each error a cell of the run notebook ``nb`` shows, as "cell i: Name: value"."""
    out = []
    for i, cell in enumerate(nb.cells):
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                out.append(f"cell {i}: {o.get('ename')}: {o.get('evalue')}")
    return out


def tiny_notebook(path, cells):
    """A notebook of ``cells`` on the torch-nbtools kernel at ``path``, its first cell tagged
    parameters."""
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "torch-nbtools", "display_name": "torch-nbtools",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.cells[0].metadata["tags"] = ["parameters"]
    nbformat.write(nb, str(path))
    return path
