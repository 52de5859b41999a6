"""results: a saved run's values checked as it loads. run.json and summary.parquet are files a
person (or a tool, or a bad disk) can edit: a text step_ms made `view` a traceback,
started=1e308 or a huge world_size an OverflowError in the report, and NaN, inf, negative
or absurd step times fed verdicts ("B/A within 1.00-9.19e+305"). Each such value is
replaced (NaN in the summary: every verdict drops NaN; started 0; world_size left to the
ranks) and the run carries an ``odd-value`` flag naming the column and the value, so the
run is shown and says what was wrong, and the other runs are untouched."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from nbtools.analysis.flags import make
from nbtools.analysis.metrics import METRICS

_MAX_TIME_S = 1e6   # 11.6 days: no step, compile or window of a lab run comes near
_SECONDS = {"ms": 1e-3, "s": 1.0, "µs": 1e-6}
_LATEST = 253402300799.0   # 9999-12-31: datetime's last second (fromtimestamp's bound)
_MAX_WORLD = 2**31 - 1     # ranks are int32 in the tables
# not checked: the rank is the key; check_max_rel is inf or NaN when compiled and eager
# disagree that far (the check-differs flag says so already)
_FREE = {"rank", "check_max_rel"}


def _range(column: str):
    """(low, high) a summary value of ``column`` must be within, or None (not a number)."""
    m = METRICS.get(column)
    if m is None or column in _FREE:
        return None
    if m.unit in _SECONDS:   # a launch-to-start delay (µs) may be negative across clocks
        return -_MAX_TIME_S / _SECONDS[m.unit] if m.unit == "µs" else 0.0, \
            _MAX_TIME_S / _SECONDS[m.unit]
    if m.unit == "%":   # profiler overhead may be negative (noise); 100x is absurd
        return -1e4, 1e4
    if m.unit == "/core":
        return 0.0, 1e4
    if m.unit == "" and m.combine not in ("", "rate"):
        return 0.0, 1e12 if m.count else 1e15
    if m.unit:
        return (0.0 if m.unit in ("MB", "/s", "MHz", "W", "TFLOP/s") else -1e15), 1e15
    return None


def _why(v, low: float, high: float) -> str:
    if isinstance(v, str):
        return "text, not a number"
    if not math.isfinite(v):
        return "not finite"
    return "negative" if v < 0 <= low else f"beyond {high:.3g}" if v > high else \
        f"below {low:.3g}"


def check_summary(summary: pd.DataFrame, ok: bool, flags: list) -> pd.DataFrame:
    """``summary`` with every value out of its column's range as NaN, each column's damage
    one flag. A NaN step_ms in an ok run is flagged too (a run that finished has one)."""
    if not len(summary):
        return summary
    out = None
    for c in summary.columns:
        bounds = _range(c)
        if bounds is None:
            continue
        col = summary[c]
        nums = pd.to_numeric(col, errors="coerce").astype("float64")
        text = col.map(lambda v: isinstance(v, str)).to_numpy(bool) if col.dtype == object \
            else np.zeros(len(col), bool)
        with np.errstate(invalid="ignore"):
            bad = text | np.isinf(nums) | (nums < bounds[0]) | (nums > bounds[1])
        bad |= nums.isna().to_numpy() & col.notna().to_numpy()   # None stays "not measured"
        if c == "step_ms" and ok:
            bad |= nums.isna().to_numpy()
        if not bad.any() and col.dtype != object:
            continue
        out = summary.copy() if out is None else out
        out[c] = nums.where(~bad)
        if bad.any():
            i = int(np.argmax(bad))
            v = col.iloc[i]
            v = v.item() if hasattr(v, "item") else v
            v = v if isinstance(v, str) else float("nan") if v is None else v
            rank = summary["rank"].iloc[i] if "rank" in summary else i
            flags.append(make("odd-value", where=f"summary {c} (rank {rank}"
                              + (f" and {int(bad.sum()) - 1} more row(s))" if bad.sum() > 1
                                 else ")"),
                              value=_value(v), why=_why(v, *bounds) if not
                              (isinstance(v, float) and math.isnan(v)) else
                              "missing in a run that finished",
                              fate="taken as NaN: shown as -, left out of verdicts"))
    return summary if out is None else out


def check_started(started, flags: list) -> float:
    """run.json's started: seconds since 1970 that a date can show, else 0 and a flag."""
    try:
        t = float(started or 0.0)
    except (TypeError, ValueError):
        t = math.nan
    if math.isfinite(t) and 0 <= t <= _LATEST:
        return t
    flags.append(make("odd-value", where="run.json started", value=_value(started),
                      why="not a time between 1970 and 9999", fate="taken as 0 (unknown)"))
    return 0.0


def check_env(env: dict, flags: list) -> dict:
    """env's world_size: a whole number of ranks an int32 holds, else dropped (the ranks
    loaded say it) with a flag."""
    w = env.get("world_size")
    if w is None or (isinstance(w, int) and not isinstance(w, bool) and 1 <= w <= _MAX_WORLD):
        return env
    flags.append(make("odd-value", where="run.json env.world_size", value=_value(w),
                      why=f"not a whole number from 1 to {_MAX_WORLD}",
                      fate="left out: the world size is the ranks the run holds"))
    return {k: v for k, v in env.items() if k != "world_size"}


def _value(v) -> str:
    s = repr(v) if isinstance(v, str) else f"{v:.3g}" if isinstance(v, float) else repr(v)
    return s if len(s) <= 40 else s[:37] + "..."
