"""Numbers in words a person reads: the one home of every number a surface prints (tables,
verdicts, flags, sentences, the CLI). Pure (no torch, no bokeh).

- ``fmt_number``: three significant figures and never e-notation ("0.0123", "10.6",
  "123", "17,493"): ``f"{x:.3g}"`` printed "1.75e+04 ms" for a 17.5 s cold start.
- ``fmt_ratio`` / ``fmt_range``: B/A and its interval ("1.04", "294", "0.00342"): two
  decimals rounded a 294x speed-up's ratio to "0.00".
- ``fmt_count``: a whole number of things, with its noun in the right number ("1 cold
  start", "3 graphs"); a count that is not whole (combined over runs) says so.
- ``fmt_ms`` / ``fmt_s``: a time in the unit that fits ("52 µs", "10.6 ms", "17.5 s").
- ``fmt_pct``, ``fmt_bytes`` (powers of 1024, as the allocator counts), ``fmt_column``
  (the CLI's fixed digits per unit, so its columns line up).

A value that was not measured says so instead of "nan" or "None".
"""
from __future__ import annotations

import math

NOT_MEASURED = "not measured"
_UNITS = ("B", "KB", "MB", "GB", "TB")
_TINY = 1e-4          # below this a number reads "<0.0001": e-notation never reaches a page


def missing(v) -> bool:
    """None, NaN or a value that is not a number at all."""
    if v is None:
        return True
    try:
        return math.isnan(float(v))
    except (TypeError, ValueError):
        return True


def fmt_number(v, digits: int = 3, none: str = NOT_MEASURED) -> str:
    """``digits`` significant figures below 1000, whole numbers with thousands separators
    from there ("17,493": more figures, never "1.75e+04"); "<0.0001" for what would need
    e-notation; ``none`` when the value is missing."""
    if missing(v):
        return none
    x = float(v)
    if math.isinf(x):
        return "infinite" if x > 0 else "-infinite"
    a = abs(x)
    if a == 0:
        return "0"
    if a < _TINY:
        return "<0.0001" if x > 0 else ">-0.0001"
    if round(a) >= 1000 or a >= 10 ** digits:
        return f"{x:,.0f}"
    text = f"{x:.{digits}g}"
    if "e" in text:       # 999.6 at 3 digits: "1e+03"
        return f"{x:,.0f}"
    return text


def fmt_ratio(x, none: str = "—") -> str:
    """A ratio as a person reads it: two decimals from 0.1 to 100 ("1.04"), whole numbers
    from 100 ("294", never "1.04e+03"), three significant figures below 0.1 ("0.00342":
    two decimals made a 294x speed-up's B/A "0.00")."""
    if missing(x):
        return none
    x = float(x)
    if 0.1 <= abs(x) < 100:
        return f"{x:.2f}"
    return fmt_number(x)


def fmt_range(low, high, fmt=fmt_ratio, none: str = "—") -> str:
    """An interval "low-high" in ``fmt``'s words ("0.91-1.10"); " to " between ends when
    one is negative, so a minus sign is never read as the dash."""
    if missing(low) or missing(high):
        return none
    lo, hi = fmt(low), fmt(high)
    if lo == hi and fmt is fmt_ratio and 0.1 <= abs(float(low)) < 100 and low != high:
        # a narrow interval (an equivalence verdict's 0.996-1.004) is never "1.00-1.00"
        lo, hi = f"{float(low):.3f}", f"{float(high):.3f}"
    return f"{lo} to {hi}" if lo.startswith("-") or hi.startswith("-") else f"{lo}-{hi}"


def fmt_count(n, noun=None, none: str = NOT_MEASURED) -> str:
    """A count: "3", "1,234"; with ``noun`` (a word, or a (singular, plural) pair) "1 cold
    start", "2 cold starts". A value that is not whole (a count averaged over runs) keeps
    one decimal and says "on average": a count is never shown as 1.41 without a word."""
    if missing(n):
        return none
    x = float(n)
    whole = x.is_integer()
    text = f"{int(x):,}" if whole else f"{x:,.1f} on average"
    if noun is None:
        return text
    one, many = (noun, noun + "s") if isinstance(noun, str) else noun
    word = one if whole and abs(x) == 1 else many
    return f"{int(x):,} {word}" if whole else f"{x:,.1f} {word} on average"


def fmt_ms(ms, none: str = NOT_MEASURED) -> str:
    """A time given in milliseconds, in the unit that fits: "850 ns", "52 µs", "10.6 ms",
    "17.5 s" (never "1.75e+04 ms")."""
    if missing(ms):
        return none
    x = float(ms)
    a = abs(x)
    if a == 0:
        return "0 ms"
    if a < 1e-3:
        return f"{fmt_number(x * 1e6)} ns"
    if a < 1:
        return f"{fmt_number(x * 1e3)} µs"
    if a < 999.5:
        return f"{fmt_number(x)} ms"
    return f"{fmt_number(x / 1e3)} s"


def fmt_s(s, none: str = NOT_MEASURED) -> str:
    """A time given in seconds, in the unit that fits (``fmt_ms``)."""
    return none if missing(s) else fmt_ms(float(s) * 1e3)


def fmt_pct(v, signed: bool = False, none: str = NOT_MEASURED) -> str:
    """A percentage: "12.3 %", "170 %", "+4.1 %" (``signed``)."""
    if missing(v):
        return none
    text = fmt_number(v)
    return f"{'+' if signed and float(v) > 0 else ''}{text} %"


def fmt_bytes(n, none: str = NOT_MEASURED) -> str:
    """'512 B', '4 KB', '1.5 MB', '2.31 GB' (three significant figures); ``none`` for a
    value that is missing (NaN: the CPU allocator keeps no reserve)."""
    if missing(n):
        return none
    v, unit = float(n), 0
    # four digits never show: 1000 KB and up reads in MB ("0.977 MB", not "1.02e+03 KB")
    while unit < len(_UNITS) - 1 and abs(v) >= 1000:
        v, unit = v / 1024, unit + 1
    return f"{v:.0f} B" if unit == 0 else f"{float(f'{v:.3g}'):g} {_UNITS[unit]}"


# Fixed digits per unit for columns that must line up (the CLI's tables): ms to the µs,
# shares to a tenth, counts and rates whole; no thousands separators, so a script reading
# the table takes each cell as a number.
_COLUMN = {"ms": "{:.3f}", "s": "{:.2f}", "%": "{:.1f}", "MB": "{:.0f}", "/s": "{:.0f}",
           "": "{:.0f}"}


def fmt_column(v, unit: str, none: str = "-") -> str:
    """A number in a fixed-width column of ``unit``: the same digits on every row;
    ``fmt_number`` for units without a fixed rule."""
    if missing(v):
        return none
    rule = _COLUMN.get(unit)
    return rule.format(float(v)) if rule else fmt_number(v)


def finite_or_nan(v) -> float:
    """``v`` as a float, NaN when it is missing, not a number or not finite (a table cell
    or a rank's report, read where NaN means "not measured")."""
    import math
    try:
        v = float(v)
    except (TypeError, ValueError):
        return math.nan
    return v if math.isfinite(v) else math.nan
