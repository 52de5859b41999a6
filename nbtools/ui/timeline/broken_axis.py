"""ui: a broken time axis for the compile strip. A run with a two-minute compile and steps of
a few ms draws, on a plain axis, the compile and one pixel of steps. Here stretches of time
in which nothing starts or ends (the inside of a long compile, a pause between warm-up and
measured steps) are cut to a fixed width when they would squeeze the steps under a few
pixels, and marked as cut; the tick labels still read real seconds. numpy only.

``knots(instants, steps)`` gives the piecewise-linear map (real seconds -> axis position)
as two increasing arrays; ``to_axis`` applies it; TICKS_JS is its inverse for tick labels.
"""
from __future__ import annotations

import numpy as np

STEP_PX = 3            # a median step narrower than this (of ~1000 px) is unreadable
AXIS_PX = 1000
CUT_STEPS = 20         # a cut stretch keeps the width of this many median steps


def knots(instants, step_durations) -> tuple[np.ndarray, np.ndarray]:
    """(real, axis) knots, both increasing, starting at the first instant. ``instants``:
    every start and end on the strip (s); ``step_durations``: the steps' lengths (s).
    Without a cut: the identity over the instants' extent."""
    t = np.unique(np.asarray(instants, np.float64))
    t = t[np.isfinite(t)]
    if len(t) < 2:
        return np.array([0.0, 1.0]), np.array([0.0, 1.0])
    d = np.asarray(step_durations, np.float64)
    d = d[np.isfinite(d) & (d > 0)]
    total = t[-1] - t[0]
    if not len(d) or np.median(d) * AXIS_PX / STEP_PX >= total:
        return np.array([t[0], t[-1]]), np.array([t[0], t[-1]])
    cap = CUT_STEPS * float(np.median(d))
    long = np.diff(t) > cap
    # long stretches side by side (a compile's end between two steps far apart) are one cut
    t = t[np.r_[True, ~(long[:-1] & long[1:]), True]]
    gaps = np.diff(t)
    axis = t[0] + np.r_[0.0, np.cumsum(np.minimum(gaps, cap))]
    return t, axis


def to_axis(x, real: np.ndarray, axis: np.ndarray) -> np.ndarray:
    """Real seconds -> axis positions (beyond the knots: shifted, not stretched)."""
    x = np.asarray(x, np.float64)
    out = np.interp(x, real, axis)
    out = np.where(x < real[0], axis[0] + (x - real[0]), out)
    return np.where(x > real[-1], axis[-1] + (x - real[-1]), out)


def cuts(real: np.ndarray, axis: np.ndarray) -> dict:
    """The cut stretches: their axis span (left, right) and the real time they stand for."""
    r, a = np.diff(real), np.diff(axis)
    cut = np.flatnonzero(r - a > 1e-12)
    return dict(left=axis[:-1][cut], right=axis[1:][cut], real_s=r[cut],
                text=[f"{v:,.1f} s cut" if v >= 10 else f"{v:.3g} s cut" for v in r[cut].tolist()])


# tick -> real seconds through the knots (linear inside each piece), written plainly
TICKS_JS = """
const A = axis, R = real;
let k = 0;
while (k < A.length - 2 && tick > A[k + 1]) k++;
const a0 = A[k], a1 = A[k + 1], r0 = R[k], r1 = R[k + 1];
if (tick > a0 && tick < a1 && r1 - r0 > (a1 - a0) * 1.001) return "";   // inside a cut
const v = tick <= a0 ? r0 + (tick - a0) : tick >= a1 ? r1 + (tick - a1)
        : r0 + (tick - a0) * (r1 - r0) / Math.max(a1 - a0, 1e-12);
const step = ticks.length > 1 ? Math.abs(ticks[1] - ticks[0]) : 1;
const dec = Math.min(6, Math.max(0, Math.ceil(-Math.log10(step) + 0.3)));
return v.toFixed(dec);
"""
