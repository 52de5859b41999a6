"""What a precision change does to the numbers: a run made with check=True measured its first
step's loss (or output) against eager in full fp32 on the same inputs and weights
(engine/runner.py:_check). This reads that, per rank, against a stated tolerance: the line
a precision move must stay inside to be kept. Pure."""
from __future__ import annotations

import math
from dataclasses import dataclass
from nbtools.common.units import finite_or_nan

NUMERICS_TOLERANCE = {"loss": 0.02, "output": 0.05}
"""Largest relative difference from full fp32 that a precision move may make and be kept:
2 % of a training step's loss (bf16 autocast moved a GPT's first-step loss by well under
1 % in our runs: docs/findings.md), 5 % of an output's largest value (forward only: every
element counts, so the largest of many bf16 roundings)."""


@dataclass(frozen=True)
class Numerics:
    """The worst rank's first-step difference from full fp32. ``ok``: finite and within
    ``tolerance``; ``measured``: False when no rank reported a full-precision check."""
    measured: bool
    ok: bool
    what: str = "loss"
    rel: float = math.nan
    abs: float = math.nan
    value: float = math.nan          # this config's first-step loss
    full_value: float = math.nan     # full fp32 eager's, same inputs and weights
    tolerance: float = math.nan
    finite: bool = True

    @property
    def text(self) -> str:
        """What the check measured, with the tolerance, in a sentence."""
        if not self.measured:
            return "numerics not measured (no rank reported a full-fp32 check)"
        if not self.finite:
            return f"the first step's {self.what} is not finite (NaN or inf): the numbers diverge"
        vals = (f"{self.value:.6g} against {self.full_value:.6g} in full fp32, "
                if self.value == self.value and self.full_value == self.full_value else "")
        return (f"first-step {self.what} {vals}a relative difference of {100 * self.rel:.2g} % "
                f"(tolerance {100 * self.tolerance:g} %)"
                + ("" if self.ok else ": over the tolerance, the numbers diverge"))


def numerics(run) -> Numerics:
    """The check of ``run`` (made with check=True), worst rank first."""
    worst = None
    for rep in (run.ranks or {}).values():
        chk = rep.get("check") if isinstance(rep, dict) else None
        if not isinstance(chk, dict) or "full_max_rel" not in chk:
            continue
        rel = finite_or_nan(chk.get("full_max_rel"))
        finite = bool(chk.get("finite", True)) and rel == rel
        key = (not finite, rel if rel == rel else math.inf)
        if worst is None or key > worst[0]:
            worst = (key, chk, rel, finite)
    if worst is None:
        return Numerics(measured=False, ok=False)
    _, chk, rel, finite = worst
    what = "loss" if str(chk.get("what", "loss")) == "loss" else "output"
    tol = NUMERICS_TOLERANCE[what]
    return Numerics(measured=True, ok=finite and rel <= tol, what=what, rel=rel,
                    abs=finite_or_nan(chk.get("full_max_abs")), value=finite_or_nan(chk.get("value")),
                    full_value=finite_or_nan(chk.get("full_value")), tolerance=tol, finite=finite)
