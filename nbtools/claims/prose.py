"""What the claim notebooks print about a table of runs, in sentences that never say "nan":
a run that failed or timed out has no numbers, and its line says so instead of
"nan recompiles in 43 steps (hit the recompile limit), ... (+nan % vs fixed length)"."""
from __future__ import annotations

import pandas as pd

from nbtools.common.units import NOT_MEASURED, fmt_bytes, fmt_count, fmt_number, missing


def num(v, fmt: str | None = None, none: str = NOT_MEASURED) -> str:
    """A number in the words every surface uses (common/units.fmt_number: three
    significant figures, never "1.75e+04"), or ``fmt`` of it; ``none`` where it is missing
    ("MFU nan %" on CPU ranks)."""
    if missing(v):
        return none
    return fmt_number(v) if fmt is None else fmt.format(float(v))


def count(n, noun=None, none: str = NOT_MEASURED) -> str:
    """A count with its noun in the right number: "1 cold start", "3 cold starts"
    (common/units.fmt_count)."""
    return fmt_count(n, noun, none)


def mb(v, none: str = "not measured on CPU") -> str:
    """A size given in MB (the summary's ``*_mb`` columns) in the unit that fits: "36 KB",
    "1.5 GB"; ``none`` where it is missing (peak_mem_mb has no value on CPU ranks)."""
    return none if missing(v) else fmt_bytes(float(v) * 2**20)


def pct_vs(values: pd.Series, base) -> pd.Series:
    """100 * (values / base - 1): how far each value lies from ``base``, in percent (NaN
    where either is missing; ``shown`` and the sentences say "not measured" there)."""
    if missing(base) or float(base) == 0:
        return pd.Series(float("nan"), index=values.index)
    return 100 * (values.astype(float) / float(base) - 1)


def shown(df: pd.DataFrame, na: str = NOT_MEASURED):
    """The table as the notebook shows it: a missing value reads ``na``, not NaN or None."""
    return df.style.format(_cell, na_rep=na).hide(axis="index")


def _cell(v):
    if isinstance(v, float):
        return fmt_count(v) if v.is_integer() else fmt_number(v)
    return v


def policy_lines(t: pd.DataFrame, steps: int, base: str = "fixed length") -> list:
    """Notebook 03's sentence per shape policy (``t``: its table with vs_fixed_pct and
    steady_vs_fixed_pct). A run without numbers (failed, timed out) says so in its line."""
    out = []
    for _, r in t.iterrows():
        head = f"measured here: dynamic={r.dynamic} {r.seq_schedule}: "
        if str(r.get("status", "ok")) != "ok" or missing(r.recompiles):
            out.append(head + f"{NOT_MEASURED}: the run {r.get('status', 'failed')} "
                       "(its error is above); no recompile count or throughput")
            continue
        limit = " (hit the recompile limit)" if not missing(r.n_limit_hit) and r.n_limit_hit \
            else ""
        out.append(head + f"{fmt_count(r.recompiles, 'recompile')} in {steps} steps{limit}, "
                   f"{_rate(r.tokens_per_s)} tokens/s over the epoch "
                   f"({_pct(r.vs_fixed_pct, base)}), "
                   f"{_rate(r.steady_tokens_per_s)} once compiled "
                   f"({_pct(r.steady_vs_fixed_pct, base)})")
    return out


def _rate(v) -> str:
    return fmt_number(v, 4)


def _pct(v, base: str) -> str:
    return f"vs {base}: {NOT_MEASURED}" if missing(v) else f"{float(v):+.0f} % vs {base}"
