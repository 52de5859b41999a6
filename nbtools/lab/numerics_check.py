"""lab.explore's check of a precision move before it keeps it: the winning config once more
with check=True on warm engines, its first step's loss (or output) read against eager in
full fp32 on the same inputs and weights (analysis/numerics.py says what is within)."""
from __future__ import annotations

import time

from nbtools.analysis.numerics import Numerics, numerics
from nbtools.lab.keep_going import run_or_keep

PRECISION_FIELDS = {"autocast", "autocast_scope", "matmul_precision"}
"""Fields whose change changes the numbers a step computes: checked before a keep."""


def changes_numbers(suggestion, change: dict) -> bool:
    """A precision move: its suggestion says so, or an ``also`` change of a precision field."""
    if suggestion is not None and getattr(suggestion, "changes_numbers", False):
        return True
    return bool(set(change) & PRECISION_FIELDS)


def check_numbers(lab, workload, cfg, timeout=None) -> tuple[Numerics, float, object]:
    """(what the check read, the seconds it took, its run). One short run: no warm-up, one
    step, unprofiled (the engines hold the compiled code from the A/B)."""
    cfg = cfg.replace(check=True, warmup=0, steps=1, profiled=0)
    t = time.perf_counter()
    checked = lab.check(workload, cfg) if workload is not None else lab.check(cfg)
    run = run_or_keep(lab, checked, timeout=timeout)
    took = time.perf_counter() - t
    return (numerics(run) if run.ok else Numerics(measured=False, ok=False)), took, run
