"""The machine's state during a run's timed steps, per rank, from what each engine sampled
(engine/machine.py): summary columns and the flags that name what was off (a clock below
its maximum and why, another process on the GPU, a busy host). Pure: dicts and tables in.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from nbtools.analysis import flags as F

REASONS = {0x2: "applications clocks setting", 0x4: "power cap", 0x8: "hardware slowdown",
           0x10: "sync boost", 0x20: "software thermal slowdown",
           0x40: "hardware thermal slowdown", 0x80: "power brake", 0x100: "display clock"}
CLOCK_LOW = 0.9          # a clock below 90 % of its maximum during a timed step is flagged
HOST_BUSY = 1.0          # more runnable tasks than cores: a step's threads waited for a core
COLUMNS = ("host_load", "sm_clock_mhz", "sm_clock_min_mhz", "sm_clock_max_mhz", "gpu_temp_c",
           "gpu_power_w", "throttle", "clock_low_steps", "gpu_other_procs", "gpu_index")


def reason_words(bits: int) -> list:
    """NVML's clock-throttle reason bits as words (e.g. "power cap"), in REASONS' order."""
    return [w for b, w in REASONS.items() if bits & b]


def _step_of(ts: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Each sample's step: the last timed step that started at or before it (-1: none)."""
    st = steps[steps["phase"].isin(["measured", "profiled"])].sort_values("ts_ns")
    if not len(st):
        return np.full(len(ts), -1)
    pos = np.searchsorted(st["ts_ns"].to_numpy(np.int64), ts, side="right") - 1
    end = (st["ts_ns"] + st["dur_ns"]).to_numpy(np.int64)
    idx = st["step"].to_numpy(np.int64)
    inside = (pos >= 0) & (ts <= end[np.clip(pos, 0, None)] + 50_000_000)   # 50 ms slack
    return np.where(inside, idx[np.clip(pos, 0, None)], -1)


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


def columns(reports: dict, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per rank with a machine report: COLUMNS."""
    rows = []
    for r, rep in sorted(reports.items()):
        m = rep.get("machine") or {}
        smp = {k: np.asarray(v, float) for k, v in (m.get("samples") or {}).items()}
        if not len(smp.get("ts_ns", ())):
            continue
        cores = float(m.get("cores") or 1)
        row = dict(rank=r, host_load=float(np.nanmean(smp["procs_running"]) / cores)
                   if np.isfinite(smp["procs_running"]).any() else np.nan)
        if "sm_max_mhz" in m:
            st = steps[steps["rank"] == r] if len(steps) else steps
            step = _step_of(smp["ts_ns"].astype(np.int64), st) if len(st) \
                else np.full(len(smp["ts_ns"]), -1)
            timed = (step >= 0) & np.isfinite(smp["sm_mhz"])
            sm = smp["sm_mhz"][timed] if timed.any() else smp["sm_mhz"]
            mx = float(m["sm_max_mhz"])
            low = timed & (smp["sm_mhz"] < CLOCK_LOW * mx)
            bits = int(np.bitwise_or.reduce(smp["reasons"][low].astype(np.int64))) if low.any() \
                else 0
            others = _other_procs(m)
            row.update(sm_clock_mhz=float(np.nanmedian(sm)), sm_clock_min_mhz=float(np.nanmin(sm)),
                       sm_clock_max_mhz=mx, gpu_temp_c=float(np.nanmax(smp["temp_c"])),
                       gpu_power_w=float(np.nanmedian(smp["power_w"])),
                       throttle=", ".join(reason_words(bits)) if low.any() else "",
                       clock_low_steps=_ranges(step[low]) if low.any() else "",
                       gpu_other_procs=others, gpu_index=int(m.get("gpu_index", -1)))
        rows.append(row)
    return pd.DataFrame(rows)


def _other_procs(m: dict) -> int:
    """Processes on the GPU besides this engine: one entry of NVML's list is the engine
    itself (in a container NVML reports host pids, so it cannot always be told by pid)."""
    return max(len(m.get("gpu_procs") or []) - 1, 0)


def flags(summary: pd.DataFrame) -> list[str]:
    """The machine's flags from the summary's COLUMNS (none when they are absent)."""
    out = []
    if "sm_clock_min_mhz" in summary:
        for _, r in summary.iterrows():
            if isinstance(r.get("clock_low_steps"), str) and r["clock_low_steps"]:
                out.append(F.make("clock-low", rank=int(r["rank"]),
                                  mhz=f"{r['sm_clock_min_mhz']:.0f}",
                                  max=f"{r['sm_clock_max_mhz']:.0f}", steps=r["clock_low_steps"],
                                  why=r.get("throttle") or "no throttle reason reported"))
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
