"""The panel driven from Python on a real lab: what several panel tests set up."""
from __future__ import annotations


def two_runs(lab, panel):
    """Two runs of the panel's (A: seed 0, B: seed 1), picked as A and B."""
    runs = []
    for seed in (0, 1):
        panel.controls["seed"].value = seed
        runs.append(panel.run())
    assert all(r is not None and r.ok for r in runs), panel.error.value
    panel.compare_a.value, panel.compare_b.value = runs[0].run_id, runs[1].run_id
    return runs
