"""The machine's state during a run's steps, per rank, from the signals each engine sampled
through the run (``run.samples``, analysis/samples.py): summary columns and the flags that
name what was off (a clock below its maximum or falling, a throttling reason, another
process on the GPU, a busy host). Pure: dicts and tables in.

Each column is one signal read over one phase: the timed steps (measured and profiled) for
the machine's state as before (host load, clocks, temperature, power), the measured steps
(those step_ms is made of) for what the advice and the new flags read (utilisation, the
process's CPU, throttling, a clock drop).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from nbtools.analysis import flags as F
from nbtools.analysis import samples as S
from nbtools.analysis.samples import reason_words

CLOCK_LOW = 0.9          # a clock below 90 % of its maximum during a timed step is flagged
CLOCK_DROP = 5.0         # % the SM clock fell within the measured steps, below its highest there
HOST_BUSY = 1.0          # more runnable tasks than cores: a step's threads waited for a core
COLUMNS = ("host_load", "sm_clock_mhz", "sm_clock_min_mhz", "sm_clock_max_mhz", "gpu_temp_c",
           "gpu_power_w", "throttle", "clock_low_steps", "gpu_other_procs", "gpu_index",
           "gpu_util_pct", "sm_active_pct", "tensor_active_pct", "dram_bw_pct", "cpu_pct", "host_cpu_pct", "throttle_seen",
           "throttle_steps", "sm_clock_drop_pct", "clock_drop_steps")
TIMED = ("measured", "profiled")
MEASURED = ("measured",)


def _ranges(steps) -> str:
    """[3, 4, 5, 9] -> '3-5, 9'."""
    s = sorted(set(int(x) for x in steps))
    out, lo = [], None
    for i, x in enumerate(s):
        lo = x if lo is None else lo
        if i + 1 == len(s) or s[i + 1] != x + 1:
            out.append(f"{lo}" if lo == x else f"{lo}-{x}")
            lo = None
    return ", ".join(out)


def _mean(v: np.ndarray) -> float:
    return float(np.nanmean(v)) if np.isfinite(v).any() else np.nan


def columns(reports: dict, steps: pd.DataFrame, samples: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per rank that sampled the machine: COLUMNS. ``samples``: the run's samples
    table (default: made from the reports' ``signals``)."""
    samples = S.table(reports) if samples is None else samples
    rows = []
    for r, rep in sorted(reports.items()):
        m = rep.get("machine") or {}
        if not len(samples) or not (samples["rank"] == r).any():
            continue
        st = steps[steps["rank"] == r] if len(steps) else steps
        one = samples[samples["rank"] == r]
        load, _ = S.during(one, st, r, "host_load", TIMED)
        row = dict(rank=r, host_load=_mean(load))
        for col in ("cpu_pct", "host_cpu_pct"):
            v, _ = S.during(one, st, r, col, MEASURED)
            if len(v):
                row[col] = _mean(v)
        # NVML's utilisation covers up to a second before each read, a GPM metric the time
        # since the last GPM sample (100 ms or more): only readings whose whole period lies
        # inside the measured steps (none where those span less)
        for col, floor in (("gpu_util_pct", S.NVML_PERIOD_NS), ("sm_active_pct", S.GPM_PERIOD_NS),
                           ("tensor_active_pct", S.GPM_PERIOD_NS),
                           ("dram_bw_pct", S.GPM_PERIOD_NS)):
            if (one["signal"] == col).any():
                period = S.read_period(one, r, col, floor)
                row[col] = _mean(S.trailing(one, st, r, col, period, MEASURED))
        if "sm_max_mhz" in m:
            row.update(_gpu(one, st, r, m))
        rows.append(row)
    return pd.DataFrame(rows)


def _gpu(one: pd.DataFrame, st: pd.DataFrame, r: int, m: dict) -> dict:
    """A GPU rank's clock, temperature, power and throttling columns."""
    wide = one.pivot_table(index="ts_ns", columns="signal", values="value", observed=True,
                           dropna=False)
    ts = wide.index.to_numpy(np.int64)
    col = (lambda k: wide[k].to_numpy(np.float64) if k in wide else np.full(len(ts), np.nan))
    sm, bits = col("sm_clock_mhz"), np.nan_to_num(col("throttle")).astype(np.int64)
    step = S.step_of(ts, st, TIMED) if len(st) else np.full(len(ts), -1)
    timed = (step >= 0) & np.isfinite(sm)
    mx = float(m["sm_max_mhz"])
    low = timed & (sm < CLOCK_LOW * mx)
    seen = sm[timed] if timed.any() else sm[np.isfinite(sm)]
    # over the timed steps' samples (all of the run's where none fell inside them)
    pick = (lambda v: v[step >= 0] if np.isfinite(v[step >= 0]).any() else v)
    temp, power = pick(col("gpu_temp_c")), pick(col("gpu_power_w"))
    out = dict(sm_clock_mhz=float(np.median(seen)) if len(seen) else np.nan,
               sm_clock_min_mhz=float(seen.min()) if len(seen) else np.nan,
               sm_clock_max_mhz=mx,
               gpu_temp_c=float(np.nanmax(temp)) if np.isfinite(temp).any() else np.nan,
               gpu_power_w=float(np.nanmedian(power)) if np.isfinite(power).any() else np.nan,
               throttle=", ".join(reason_words(np.bitwise_or.reduce(bits[low])))
               if low.any() else "",
               clock_low_steps=_ranges(step[low]) if low.any() else "",
               gpu_other_procs=_other_procs(m), gpu_index=int(m.get("gpu_index", -1)))
    # the measured steps: a throttling reason while they ran, the clock falling within them
    mstep = S.step_of(ts, st, MEASURED) if len(st) else np.full(len(ts), -1)
    meas = mstep >= 0
    hot = meas & ((bits & S.THROTTLING) != 0)
    out.update(throttle_seen=", ".join(reason_words(np.bitwise_or.reduce(bits[hot] & S.THROTTLING)))
               if hot.any() else "", throttle_steps=_ranges(mstep[hot]) if hot.any() else "")
    clk = meas & np.isfinite(sm)
    if clk.any():
        hi = float(sm[clk].max())
        drop = 100 * (hi - float(sm[clk].min())) / hi if hi > 0 else 0.0
        fell = clk & (sm < hi * (1 - CLOCK_DROP / 100))
        out.update(sm_clock_drop_pct=drop,
                   clock_drop_steps=_ranges(mstep[fell]) if drop >= CLOCK_DROP else "")
    return out


def _other_procs(m: dict) -> int:
    """Processes on the GPU besides this engine: one entry of NVML's list is the engine
    itself (in a container NVML reports host pids, so it cannot always be told by pid)."""
    return max(len(m.get("gpu_procs") or []) - 1, 0)


def _text(v) -> str:
    return v if isinstance(v, str) else ""


def flags(summary: pd.DataFrame) -> list[str]:
    """The machine's flags from the summary's COLUMNS (none when they are absent). A rank
    whose clock was low (clock-low) is not named again for throttling or a clock drop in
    the same steps: clock-low gives the reasons already."""
    out = []
    if "sm_clock_min_mhz" in summary:
        for _, r in summary.iterrows():
            if _text(r.get("clock_low_steps")):
                out.append(F.make("clock-low", rank=int(r["rank"]),
                                  mhz=f"{r['sm_clock_min_mhz']:.0f}",
                                  max=f"{r['sm_clock_max_mhz']:.0f}", steps=r["clock_low_steps"],
                                  why=r.get("throttle") or "no throttle reason reported"))
                continue
            if _text(r.get("clock_drop_steps")):
                out.append(F.make("clock-drop", rank=int(r["rank"]),
                                  pct=f"{r['sm_clock_drop_pct']:.1f}",
                                  steps=r["clock_drop_steps"],
                                  why=_text(r.get("throttle_seen")) or
                                  "no throttle reason reported"))
            elif _text(r.get("throttle_seen")):
                out.append(F.make("throttled", rank=int(r["rank"]), why=r["throttle_seen"],
                                  steps=r["throttle_steps"]))
        other = summary[pd.to_numeric(summary.get("gpu_other_procs"), errors="coerce") > 0]
        for _, r in other.iterrows():
            out.append(F.make("gpu-shared", gpu=int(r["gpu_index"]),
                              n=int(r["gpu_other_procs"]), rank=int(r["rank"])))
    if "host_load" in summary:
        busy = summary[pd.to_numeric(summary["host_load"], errors="coerce") > HOST_BUSY]
        hosts = busy.groupby(busy["host"] if "host" in busy else pd.Series("", busy.index))
        for host, g in hosts:
            out.append(F.make("host-busy", load=f"{g['host_load'].max():.1f}",
                              ranks=", ".join(str(int(x)) for x in g["rank"]),
                              host=host or "this host"))
    return out


# flags that describe the machine a lab runs on rather than one run: said once per lab
ONCE_PER_LAB = ("host-busy",)


def once_per_lab(flags: list, said: set) -> list:
    """A run's flags without those of ONCE_PER_LAB this lab has said already (``said``:
    the ids said, updated here). On a shared 2-core box every run read "host busy"; the
    load stays in each run's summary (host_load)."""
    out = []
    for text in flags:
        fid = F.identify(text)
        if fid in ONCE_PER_LAB:
            if fid in said:
                continue
            said.add(fid)
        out.append(text)
    return out


def oversubscribed(hosts: dict) -> list:
    """host -> (ranks there, compute threads per rank, cores there): a sentence per host
    where the ranks have more threads than the cores they share (said once, when the lab
    starts: every step there waits for a core now and then)."""
    out = []
    for host, (ranks, threads, cores) in sorted(hosts.items()):
        if ranks * threads > cores:
            out.append(f"host busy: {ranks} ranks x {threads} thread(s) share {cores} core(s) "
                       f"on {host}: steps wait for a core, so their times scatter more than on "
                       "a quiet machine; treat differences within the steps' spread as noise "
                       "(said once for this lab)")
    return out
