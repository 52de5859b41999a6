"""Numbers in words a person reads: byte sizes in the unit that fits (B, KB, MB, GB; powers
of 1024, as the allocator counts), and a value that was not measured said so instead of
"nan" or "None". Pure (no torch, no bokeh): every surface that writes a size calls this."""
from __future__ import annotations

import math

NOT_MEASURED = "not measured"
_UNITS = ("B", "KB", "MB", "GB", "TB")


def missing(v) -> bool:
    """None, NaN or a value that is not a number at all."""
    if v is None:
        return True
    try:
        return math.isnan(float(v))
    except (TypeError, ValueError):
        return True


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


def fmt_number(v, fmt: str = "{:.4g}", none: str = NOT_MEASURED) -> str:
    """``fmt`` of ``v``, or ``none`` when it is missing."""
    return none if missing(v) else fmt.format(float(v))
