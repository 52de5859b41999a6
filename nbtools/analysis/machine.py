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
OTHERS_BUSY = 0.5        # cores other processes kept busy before that wait is theirs, not the
                         # ranks' own: a 2-rank CPU run fills a 2-core host by itself
COLUMNS = ("host_load", "sm_clock_mhz", "sm_clock_min_mhz", "sm_clock_max_mhz", "gpu_temp_c",
           "gpu_power_w", "throttle", "clock_low_steps", "gpu_other_procs", "gpu_index",
           "gpu_util_pct", "sm_active_pct", "tensor_active_pct", "dram_bw_pct", "cpu_pct",
           "host_cpu_pct", "throttle_seen", "throttle_steps", "sm_clock_drop_pct",
           "clock_drop_steps", "host_other_cores", "host_cores")
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
        v, _ = S.during(one, st, r, "cpu_pct", MEASURED)
        if len(v):
            row["cpu_pct"] = _mean(v)
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
        row["_host"], row["host_cores"] = rep.get("host", ""), m.get("cores", np.nan)
        row["_busy"], row["_own"] = _host_and_own(one, st, r)
        if not np.isfinite(row["_own"]):
            # no own reading inside a host window (a starved sampler on a busy host): its
            # CPU over the measured steps stands for it rather than losing the whole host
            row["_own"] = row.get("cpu_pct", np.nan)
        # the host's busy share over the same readings host_other_cores is made from (a
        # busy host once starved the sampler of any reading after the steps: the other
        # cores were counted and the share itself was missing)
        if np.isfinite(row["_busy"]):
            row["host_cpu_pct"] = row["_busy"]
        rows.append(row)
    return _others(pd.DataFrame(rows))


def _host_and_own(one: pd.DataFrame, st: pd.DataFrame, r: int) -> tuple:
    """(host's busy %, the rank's own CPU %) over the host readings whose window (since the
    reading before, /proc/stat every 0.25 s or more) overlaps the timed steps: the same
    stretch of time for both. Where none does (steps shorter than a window, sampling ended
    before the next read) the last reading before them stands for them: the others' CPU
    just before the steps."""
    ts, busy = S.series(one, r, "host_cpu_pct")
    st = st[st["phase"].astype(str).isin(list(TIMED))] if len(st) else st
    if not len(ts) or not len(st):
        return np.nan, np.nan
    first = int(one["ts_ns"].min())
    lo, hi = int(st["ts_ns"].min()), int((st["ts_ns"] + st["dur_ns"]).max())
    since = np.concatenate([[first], ts[:-1]])
    pick = (ts >= lo) & (since <= hi)
    if not pick.any():
        pick = np.arange(len(ts)) == len(ts) - 1
    t_own, own = S.series(one, r, "cpu_pct")
    inside = np.zeros(len(t_own), bool)
    for a, b in zip(since[pick], ts[pick]):
        inside |= (t_own > a) & (t_own <= b)
    return float(np.mean(busy[pick])), _mean(own[inside])


def _others(cols: pd.DataFrame) -> pd.DataFrame:
    """``host_other_cores`` on every rank's row: the cores of its host that processes other
    than the lab's ranks there kept busy while they timed steps, the host's busy share
    (each rank reads it; their mean) less the ranks' own CPU time (never below 0; NaN
    where a rank had no reading). The runnable count (host_load) cannot tell the ranks'
    threads from others'."""
    if not len(cols):
        return cols
    by = cols["_host"].astype(str)
    per_host = (cols["_busy"].groupby(by).transform("mean") * cols["host_cores"] / 100
                - cols["_own"].groupby(by).transform(lambda v: v.sum(min_count=len(v))) / 100)
    cols["host_other_cores"] = per_host.clip(lower=0.0)
    if "host_cpu_pct" in cols:
        # one host, one busy share: a rank whose sampler read none shows its host's
        cols["host_cpu_pct"] = cols["host_cpu_pct"].fillna(
            cols["_busy"].groupby(by).transform("mean"))
    return cols.drop(columns=["_host", "_busy", "_own"])


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
    busy = summary[busy_host(summary)]
    hosts = busy.groupby(busy["host"] if "host" in busy else pd.Series("", busy.index))
    for host, g in hosts:
        words = dict(load=f"{g['host_load'].max():.1f}", host=host or "this host",
                     ranks=", ".join(str(int(x)) for x in g["rank"]))
        if "host_other_cores" not in g:      # a summary without the ranks' CPU: load alone
            out.append(F.FLAGS["host-busy"].older[0].format(**words))
            continue
        others = pd.to_numeric(g["host_other_cores"], errors="coerce").max()
        out.append(F.make("host-busy", others=f"{others:.1f}", cores=_cores(g), **words))
    return out


def _cores(g: pd.DataFrame) -> str:
    c = pd.to_numeric(g.get("host_cores", pd.Series(dtype=float)), errors="coerce").max()
    return f"{c:.0f}" if np.isfinite(c) else "the"


def busy_host(summary: pd.DataFrame) -> pd.Series:
    """Per summary row: its rank timed steps on a host busy with something else, more
    runnable tasks than cores while processes other than the lab's ranks kept
    OTHERS_BUSY cores or more busy. A saved run from before host_other_cores was measured
    is judged by its load alone, as it was then."""
    if "host_load" not in summary:
        return pd.Series(False, index=summary.index)
    loaded = pd.to_numeric(summary["host_load"], errors="coerce") > HOST_BUSY
    if "host_other_cores" not in summary:
        return loaded
    others = pd.to_numeric(summary["host_other_cores"], errors="coerce")
    return loaded & (others >= OTHERS_BUSY)


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
