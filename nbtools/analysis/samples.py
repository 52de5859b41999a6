"""The machine's signals through a run (``run.samples``): one row per (rank, time, signal),
and the samples of a phase of the run. Pure: tables in, tables out; engine/signals.py samples
them. What each signal is (name, label, unit, the scale a lane draws it on) is
schema/signals.py's ``SIGNALS``. Times are the events' clock
(epoch ns, ``time.time_ns()`` on the rank), so a sample lines up with the kernels, steps
and compiles of its rank.
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from nbtools.schema import tables
from nbtools.schema.signals import (BY_NAME, GPU_POWER, GPU_TEMP, HOST_LOAD, SAMPLE_COLUMNS,
                                    SM_CLOCK, THROTTLE)

# NVML clock event reasons (nvml.h nvmlClocksEventReason*) -> words
REASONS = {0x1: "GPU idle", 0x2: "applications clocks setting", 0x4: "power cap",
           0x8: "hardware slowdown", 0x10: "sync boost", 0x20: "software thermal slowdown",
           0x40: "hardware thermal slowdown", 0x80: "power brake", 0x100: "display clock"}
# the reasons that slow a working GPU down (idle, a clock setting, sync boost: not throttling)
THROTTLING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
SLACK_NS = 50_000_000   # a sample up to 50 ms after a step's end still speaks of it (NVML's
                        # values are averages over the time before the read)
# NVML's utilisation is the busy share of its own sample period, "between 1 second and 1/6
# second depending on the product" (nvml.h): a reading speaks of the measured steps alone
# only if the second before it lies inside them
NVML_PERIOD_NS = 1_000_000_000
# a GPM metric is computed between two GPM samples, which NVML wants over 100 ms apart
# ("due to the internal sample refresh rate"): a reading speaks of the time since the last
GPM_PERIOD_NS = 100_000_000


def empty() -> pd.DataFrame:
    """A samples table with no rows (a run without signals: ``load_traces``, sampling off)."""
    return tables.empty(SAMPLE_COLUMNS)


def reason_words(bits: int) -> list:
    """NVML's clock event reason bits as words (e.g. "power cap"), in REASONS' order."""
    return [w for b, w in REASONS.items() if int(bits) & b]


def from_wire(rank: int, wire: dict) -> pd.DataFrame:
    """One rank's samples as the engine sends them (``ts_ns`` and one array per signal,
    engine/signals.py) -> the long table."""
    ts = np.asarray(wire.get("ts_ns", ()), np.int64)
    values = {k: np.asarray(v, np.float64) for k, v in (wire.get("values") or {}).items()
              if len(v) == len(ts)}
    if not len(ts) or not values:
        return empty()
    names = list(values)
    n = len(ts)
    codes = np.repeat(np.arange(len(names), dtype=np.int32), n)
    value = np.concatenate([values[k] for k in names])
    # NaN: nothing was read there (a failed read, a signal taken every few samples)
    keep = np.isfinite(value)
    return pd.DataFrame({
        "rank": np.full(int(keep.sum()), rank, np.int32),
        "ts_ns": np.tile(ts, len(names))[keep],
        "signal": pd.Categorical.from_codes(codes[keep],
                                            categories=pd.Index(names, dtype=object)),
        "value": value[keep]})


def table(reports: dict) -> pd.DataFrame:
    """Every rank's samples, one table (ranks that sent none add nothing)."""
    frames = [from_wire(r, rep["signals"]) for r, rep in sorted(reports.items())
              if isinstance(rep, dict) and rep.get("signals")]
    return tables.concat(frames, SAMPLE_COLUMNS)


# runs saved before the samples table kept a few signals in run.json, at 10 or 2 per second
_OLD = {"procs_running": HOST_LOAD, "sm_mhz": SM_CLOCK, "temp_c": GPU_TEMP,
        "power_w": GPU_POWER, "reasons": THROTTLE}


def from_machine_reports(ranks: dict, damaged: list | None = None) -> pd.DataFrame:
    """The samples of a run saved before ``samples.parquet`` existed: what each rank's
    ``machine`` report kept over the timed steps (host load, SM clock, temperature, power,
    reasons), so an old run still draws its lanes and keeps its columns. A rank whose
    samples cannot be read loses its lanes, not the run: its key goes to ``damaged``."""
    frames = []
    for r, m in sorted(ranks.items(), key=lambda kv: str(kv[0])):
        m = (m or {}).get("machine") if isinstance(m, dict) else None
        smp = (m or {}).get("samples") if isinstance(m, dict) else None
        if smp is None:
            continue
        try:   # anything in an old run.json may be malformed (ts_ns: 5, cores: "x", ...)
            if not len(smp.get("ts_ns") or ()):
                continue
            values = {new: smp[old] for old, new in _OLD.items() if old in smp}
            if HOST_LOAD in values:
                values[HOST_LOAD] = np.asarray(values[HOST_LOAD], float) / \
                    float(m.get("cores") or 1)
            frames.append(from_wire(int(r), dict(ts_ns=smp["ts_ns"], values=values)))
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError):
            if damaged is not None:
                damaged.append(str(r))
    return tables.concat(frames, SAMPLE_COLUMNS)


def series(samples: pd.DataFrame, rank: int, signal: str) -> tuple[np.ndarray, np.ndarray]:
    """(ts_ns, values) of one rank's signal, in time order."""
    if samples is None or not len(samples):
        return np.zeros(0, np.int64), np.zeros(0)
    s = samples[(samples["rank"] == rank) & (samples["signal"] == signal)]
    s = s.sort_values("ts_ns", kind="stable")
    return s["ts_ns"].to_numpy(np.int64), s["value"].to_numpy(np.float64)


def step_of(ts: np.ndarray, steps: pd.DataFrame, phases=("measured", "profiled"),
            slack_ns: int = SLACK_NS) -> np.ndarray:
    """Each sample's step among ``steps`` of ``phases`` (one rank's): the last such step that
    started at or before it, if the sample falls before that step's end plus ``slack_ns``;
    -1 for samples outside them."""
    st = steps[steps["phase"].astype(str).isin(list(phases))] if len(steps) else steps
    if not len(st):
        return np.full(len(ts), -1)
    st = st.sort_values("ts_ns")
    pos = np.searchsorted(st["ts_ns"].to_numpy(np.int64), ts, side="right") - 1
    end = (st["ts_ns"] + st["dur_ns"]).to_numpy(np.int64)
    idx = st["step"].to_numpy(np.int64)
    at = np.clip(pos, 0, None)
    inside = (pos >= 0) & (ts <= end[at] + slack_ns)
    return np.where(inside, idx[at], -1)


def during(samples: pd.DataFrame, steps: pd.DataFrame, rank: int, signal: str,
           phases=("measured",)) -> tuple[np.ndarray, np.ndarray]:
    """(values, their steps) of one rank's signal sampled during its steps of ``phases``.
    Steps shorter than the sampling interval may hold no sample: then the first sample
    after the last of them stands for them (NVML's and /proc's readings cover the time
    before the read), counted as that step's."""
    ts, v = series(samples, rank, signal)
    st = steps[steps["rank"] == rank] if len(steps) else steps
    step = step_of(ts, st, phases) if len(ts) else np.zeros(0, np.int64)
    keep = step >= 0
    if not keep.any() and len(ts) and len(st):
        st = st[st["phase"].astype(str).isin(list(phases))]
        if len(st):
            last = st.loc[st["ts_ns"].idxmax()]
            after = np.flatnonzero(ts >= int(last["ts_ns"]))
            if len(after):
                return v[after[:1]], np.array([int(last["step"])])
    return v[keep], step[keep]


def trailing(samples: pd.DataFrame, steps: pd.DataFrame, rank: int, signal: str,
             period_ns: int = NVML_PERIOD_NS, phases=("measured",)) -> np.ndarray:
    """Values of one rank's signal whose reading covers only its steps of ``phases``: a
    signal averaged over the ``period_ns`` before each read (NVML's utilisation) counts
    where that whole period lies between the first such step's start and the last one's
    end (plus SLACK_NS). Empty when the steps span less than ``period_ns``: on a
    millisecond step such a reading is mostly the time before the steps."""
    ts, v = series(samples, rank, signal)
    st = steps[(steps["rank"] == rank) & steps["phase"].astype(str).isin(list(phases))] \
        if len(steps) else steps
    if not len(ts) or not len(st):
        return np.zeros(0)
    lo = int(st["ts_ns"].min()) + period_ns
    hi = int((st["ts_ns"] + st["dur_ns"]).max()) + SLACK_NS
    return v[(ts >= lo) & (ts <= hi)]


def read_period(samples: pd.DataFrame, rank: int, signal: str, floor_ns: int) -> int:
    """The time one reading of a signal covers: the median gap between its readings (a
    GPM metric is read every few samples), at least ``floor_ns``."""
    ts, v = series(samples, rank, signal)
    ts = ts[np.isfinite(v)]
    gap = int(np.median(np.diff(ts))) if len(ts) > 1 else 0
    return max(gap, floor_ns)


def scale_of(signal: str, values: np.ndarray, machine: dict | None) -> float:
    """What a lane's full height stands for: the signal's fixed scale, the limit the rank's
    machine report gives (SM clock maximum, power limit, memory), else the largest value
    (at least 1, so an idle row stays flat)."""
    s = BY_NAME.get(signal)
    fixed = s.scale if s is not None else ""
    if isinstance(fixed, (int, float)):
        return float(fixed)
    finite = values[np.isfinite(values)] if len(values) else values
    top = float(finite.max()) if len(finite) else 0.0
    if fixed and isinstance(machine, dict):
        try:
            lim = float(machine.get(fixed))
        except (TypeError, ValueError):
            lim = float("nan")
        if np.isfinite(lim) and lim > 0:
            return max(lim, top)
    return max(top, 1.0)
