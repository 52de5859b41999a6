"""Why a run's step takes what it takes, before anything is proposed: per rank, how much of
the profiled step the GPU waited and why (analysis/idle.py: host wait, kernel wait, other),
where the host was during host wait, how small the kernels are, and how much the profiler
itself stretched the step. The rules (host_rules.py) pick their move from this; ``run.why()``
shows it. Pure: the run's summary in, numbers and words out."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from nbtools.analysis.idle import CAUSE_WORDS, CPU_WORDS, HOST_CAUSES, cpu_step_split
from nbtools.common.units import finite_or_nan

BOUND_SHARE = 0.30
"""The GPU idle for at least this share of the profiled step is a step the GPU waits in:
on 2 x H200, eager TP at batch 1 idled 64 % of its step (2.77 of 4.32 ms), the same step
under reduce-overhead 4 %."""
STRETCH_PCT = 20.0
"""A profiled step this much longer than the unprofiled ones: the shares below are of a
step the profiler stretched (it costs per op, so a host-bound step most)."""


@dataclass(frozen=True)
class Diagnosis:
    """One rank's profiled step: what it was bound by and the numbers that say so. ``bound``
    is host (the GPU waited for launches), kernel (back-to-back launch gaps), other (kernels
    launched in time that still waited), comm (communication no compute hides: collectives
    waiting for their peers count as busy GPU time), gpu (busy computing: the kernels
    themselves), cpu (a CPU rank: no GPU to wait) or unknown (no timeline)."""
    rank: int
    bound: str
    window_ms: float = math.nan
    idle_ms: float = math.nan
    waits: dict = field(default_factory=dict)       # host/kernel/other -> ms
    host: dict = field(default_factory=dict)        # HOST_CAUSES -> ms, largest first
    kernels: float = math.nan                       # kernels per profiled step
    kernel_us: float = math.nan                     # mean kernel time, us
    graph_pct: float = math.nan
    step_ms: float = math.nan                       # the unprofiled median
    profiled_ms: float = math.nan                   # the profiled median
    device: str = ""
    exposed_ms: float = math.nan                    # communication no compute hid
    gpu_util_pct: float = math.nan                  # NVML GPU busy over the measured steps
    cpu_pct: float = math.nan                       # the rank process's CPU (100: one core)
    cpu_steps: int = 0              # a CPU rank's profiled steps that ``host`` splits (mean)

    @property
    def idle_share(self) -> float:
        """The GPU's idle time as a share of the profiled step (NaN: no step)."""
        return self.idle_ms / self.window_ms if self.window_ms > 0 else math.nan

    def share(self, ms: float) -> float:
        """``ms`` as a share of the profiled step."""
        return ms / self.window_ms if self.window_ms > 0 else math.nan

    @property
    def host_share(self) -> float:
        """Host wait as a share of the profiled step."""
        return self.share(self.waits.get("host", 0.0))

    @property
    def stretch_pct(self) -> float:
        """How much longer the profiled step was than the unprofiled ones (%)."""
        if not (self.step_ms > 0 and self.profiled_ms > 0):
            return math.nan
        return 100 * (self.profiled_ms / self.step_ms - 1)

    def top_host(self, n: int = 3) -> list:
        """The n largest host causes: [(cause, ms)], 'other' last among equals."""
        return [(c, ms) for c, ms in self.host.items() if ms > 0][:n]

    @property
    def text(self) -> str:
        """The diagnosis in a sentence or two, with its numbers."""
        if self.bound == "unknown":
            return (f"rank {self.rank}: no profiled steps to read (profiled=0 or "
                    "capture off): run with profiled >= 1 to see why the step takes its time"
                    + self.signals_text())
        if self.bound == "cpu":
            return self._cpu_text()
        parts = [f"rank {self.rank}: the GPU idled {self.idle_ms:.3g} ms of a "
                 f"{self.window_ms:.3g} ms profiled step ({_pct(self.idle_share)})"]
        w = self.waits
        if self.idle_ms > 0:
            parts.append(f"host wait {w.get('host', 0):.3g} ms, kernel wait "
                         f"{w.get('kernel', 0):.3g} ms, other {w.get('other', 0):.3g} ms")
        top = self.top_host()
        if top and self.bound == "host":
            parts.append("while it waited the host was in " + ", ".join(
                f"{CAUSE_WORDS[c]} {ms:.3g} ms ({_pct(self.share(ms))})" for c, ms in top))
        if self.bound == "comm":
            parts.append(f"exposed communication {self.exposed_ms:.3g} ms "
                         f"({_pct(self.share(self.exposed_ms))}): collective kernels that "
                         "wait for their peers, which count as busy")
        if self.kernels == self.kernels and self.kernels > 0:
            parts.append(f"{self.kernels:.0f} kernels a step, {self.kernel_us:.3g} us each "
                         f"on average" + (f", {self.graph_pct:.0f} % from CUDA graphs"
                                          if self.graph_pct == self.graph_pct else ""))
        s = "; ".join(parts)
        verdict = {"host": "bound by the host (the GPU waits for launches)",
                   "kernel": "bound by launch gaps between kernels launched in time",
                   "other": "waiting on something other than the host (syncs, peers, "
                            "other streams)",
                   "comm": "bound by communication no compute hides (often waiting for "
                           "a slower peer: see the straggler line)",
                   "gpu": "GPU-bound (busy: the kernels themselves take the time)"}[self.bound]
        s += f". {verdict[0].upper() + verdict[1:]}."
        s += self.signals_text()
        if self.stretch_pct == self.stretch_pct and self.stretch_pct >= STRETCH_PCT:
            s += (f" The profiler stretched this step by {self.stretch_pct:.0f} % "
                  f"({self.profiled_ms:.3g} ms profiled against {self.step_ms:.3g} ms "
                  "unprofiled): it costs per op, so the host's share above is overstated.")
        return s

    def _cpu_text(self) -> str:
        head = f"rank {self.rank} ran on the CPU: no GPU to wait for"
        if not self.cpu_steps:
            return (f"{head}; its step is operator time on the cores ({self.window_ms:.3g} ms "
                    "profiled step)")
        whole = sum(self.host.values())
        top = [(c, ms) for c, ms in self.host.items() if ms > 0 and ms >= 0.05 * whole][:4]
        parts = ", ".join(f"{CPU_WORDS[c]} {ms:.3g} ms ({_pct(ms / whole)})" for c, ms in top)
        n = self.cpu_steps
        return (f"{head}; its profiled step ({'mean of ' + str(n) if n > 1 else 'one'}, "
                f"{whole:.3g} ms) went to {parts}")

    def signals_text(self) -> str:
        """What the machine's own signals say over the unprofiled measured steps: the GPU
        seldom busy while the rank's process keeps a core busy is a host-bound step without
        the profiler's stretch (issue 45: NVML utilisation sampled through the run)."""
        if not (self.gpu_util_pct == self.gpu_util_pct and self.cpu_pct == self.cpu_pct):
            return ""
        s = (f" Unprofiled, the GPU was busy {self.gpu_util_pct:.0f} % of the measured steps "
             f"(NVML) and the rank's process used {self.cpu_pct:.0f} % of a core")
        if not self.host_bound_by_signals:
            return s + "."
        if self.bound == "host":
            return s + ": the host is the bottleneck there too."
        if self.bound == "unknown":
            return s + ": the host is the bottleneck."
        return s + (": that reads host-bound, unlike the profiled step (a second's readings "
                    "can hold pauses between the steps).")

    @property
    def host_bound_by_signals(self) -> bool:
        """The machine's signals alone read host-bound: the GPU busy under half the time
        while the rank's process keeps most of a core busy."""
        return (self.gpu_util_pct == self.gpu_util_pct and self.gpu_util_pct < 50
                and self.cpu_pct == self.cpu_pct and self.cpu_pct >= 80)


def diagnose(run, cpu_split: bool = False) -> list:
    """One Diagnosis per rank of the run's summary (empty: no summary). ``cpu_split``: a CPU
    rank's diagnosis says where its profiled steps went (idle.cpu_step_split, read from
    the events: run.why() asks for it, the rules do not need it)."""
    sm = run.summary
    out = []
    if sm is None or not len(sm):
        return out
    split = None
    if cpu_split and (sm.get("device", pd.Series(dtype=object)) != "gpu").any():
        split = cpu_step_split(run.events)
    for _, r in sm.iterrows():
        g = lambda k: finite_or_nan(r.get(k))  # noqa: E731
        device = str(r.get("device", "") or "")
        window = g("profiled_window_ms")
        common = dict(rank=int(r["rank"]), window_ms=window, step_ms=g("step_ms"),
                      profiled_ms=g("profiled_step_ms"), device=device,
                      gpu_util_pct=g("gpu_util_pct"), cpu_pct=g("cpu_pct"))
        if not window > 0:
            out.append(Diagnosis(bound="unknown", **common))
            continue
        if device != "gpu":
            mine = split[split["rank"] == common["rank"]] if split is not None else ()
            host = {}
            if len(mine):
                host = {c: float(mine[f"host_{c}_ms"].mean()) for c in HOST_CAUSES}
                host = dict(sorted(host.items(), key=lambda kv: (-kv[1], kv[0] == "other")))
            out.append(Diagnosis(bound="cpu", idle_ms=g("idle_ms"), host=host,
                                 cpu_steps=len(mine), **common))
            continue
        waits = {k: g(f"{k}_wait_ms") for k in ("host", "kernel", "other")}
        waits = {k: (v if v == v else 0.0) for k, v in waits.items()}
        host = {c: g(f"host_{c}_ms") for c in HOST_CAUSES}
        host = dict(sorted(((c, v if v == v else 0.0) for c, v in host.items()),
                           key=lambda kv: (-kv[1], kv[0] == "other")))
        idle = g("idle_ms")
        kernels, compute = g("kernels"), g("compute_ms")
        prof = g("annotated_steps") if g("annotated_steps") > 0 else 1.0
        per_step = kernels / prof if kernels == kernels else math.nan
        mean_us = 1e3 * compute / per_step if per_step and per_step > 0 else math.nan
        bound = "gpu"
        exposed = g("exposed_comm_ms")
        if idle == idle and idle / window >= BOUND_SHARE:
            bound = max(waits, key=waits.get)
        elif exposed == exposed and exposed / window >= BOUND_SHARE:
            bound = "comm"
        out.append(Diagnosis(bound=bound, idle_ms=idle, waits=waits, host=host,
                             kernels=per_step, kernel_us=mean_us, exposed_ms=exposed,
                             graph_pct=g("graph_coverage_pct"), **common))
    return out


def worst(diagnoses: list):
    """The rank whose step waited most (largest idle share), else the first; None: none."""
    if not diagnoses:
        return None
    scored = [d for d in diagnoses if d.idle_share == d.idle_share]
    return max(scored, key=lambda d: d.idle_share) if scored else diagnoses[0]


class Why(list):
    """``run.why()``: a Diagnosis per rank (the step's waits and where the host was), and
    ``gpu``: a GpuReading per GPU rank (what its kernels computed, analysis/gpu_reading.py);
    prints and renders as sentences, the host's first."""

    def __init__(self, diagnoses=(), gpu=()):
        super().__init__(diagnoses)
        self.gpu = list(gpu)

    def __str__(self) -> str:
        if not self and not self.gpu:
            return "no summary to read"
        lines = [d.text for d in self]
        if self.gpu:
            lines += ["GPU work:"] + [g.text for g in self.gpu]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        import html
        out = "<ul>" + "".join(f"<li>{html.escape(d.text)}</li>" for d in self) + "</ul>"
        if self.gpu:
            out += ("<p><b>what the GPU computed</b> (kernels by kind and dtype)</p><ul>"
                    + "".join(f"<li>{html.escape(g.text)}</li>" for g in self.gpu) + "</ul>")
        return out



def _pct(x: float) -> str:
    return f"{100 * x:.0f} %" if x == x else "?"
