"""Engine side: the machine's state while a run's steps are timed: host load on every
device; on a GPU also its SM clock, temperature, power, throttle reasons (NVML through
nvidia-ml-py, imported lazily: absent on CPU, or without the package, with no error) and
the other processes on it. Plain data back; analysis/machine.py turns it into columns and
flags.

Why sampling does not steal the step's host time: one daemon thread samples at a low rate
(``INTERVAL_S``: 10 per second on a GPU, 2 on CPU) and only between ``start`` and ``stop``
(the measured and profiled steps). A sample is a read of /proc/stat and, on a GPU, five
NVML queries; NVML's calls go through ctypes, which drops the GIL while the driver
answers, so the step's thread waits for the sampler only for the few Python lines
around them (tens of µs per sample, under 0.1 % of a step's host time at 10 Hz). The
lists of processes on the GPU are read once before and once after the steps, outside the
timed region. benchmarks/fidelity.py measures the whole engine, sampler included,
against a plain script.
"""
from __future__ import annotations

import os
import threading
import time

INTERVAL_S = {"cuda": 0.1, "cpu": 0.5}
# NVML clock event ("throttle") reason bits -> words (nvml.h, nvmlClocksEventReason*)
REASONS = {0x2: "applications clocks setting", 0x4: "power cap", 0x8: "hardware slowdown",
           0x10: "sync boost", 0x20: "software thermal slowdown",
           0x40: "hardware thermal slowdown", 0x80: "power brake", 0x100: "display clock"}
SAMPLE_KEYS = ("ts_ns", "procs_running", "sm_mhz", "temp_c", "power_w", "reasons")


def procs_running() -> float:
    """Runnable tasks on the host now (/proc/stat), NaN where there is no /proc."""
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("procs_running"):
                    return float(line.split()[1])
    except OSError:
        pass
    return float("nan")


class _Nvml:
    """One GPU's NVML handle: the device this engine sees as cuda:0."""

    def __init__(self):
        import pynvml   # nvidia-ml-py
        pynvml.nvmlInit()
        self.nv = pynvml
        self.handle = self._handle()
        self.max_sm = float(pynvml.nvmlDeviceGetMaxClockInfo(self.handle, pynvml.NVML_CLOCK_SM))
        try:
            self.power_limit_w = pynvml.nvmlDeviceGetEnforcedPowerLimit(self.handle) / 1e3
        except pynvml.NVMLError:
            self.power_limit_w = float("nan")
        self.index = int(pynvml.nvmlDeviceGetIndex(self.handle))
        reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        self._reasons = reasons

    def _handle(self):
        nv = self.nv
        try:   # CUDA_VISIBLE_DEVICES does not apply to NVML: find our device by its UUID
            import torch
            uuid = str(torch.cuda.get_device_properties(0).uuid)
            return nv.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else "GPU-" + uuid)
        except Exception:
            first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
            return nv.nvmlDeviceGetHandleByIndex(int(first) if first.isdigit() else 0)

    def sample(self) -> dict:
        nv, h = self.nv, self.handle
        return dict(sm_mhz=float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                    temp_c=float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                    power_w=nv.nvmlDeviceGetPowerUsage(h) / 1e3,
                    reasons=int(self._reasons(h)))

    def processes(self) -> list:
        """[(pid, used MB)] of compute processes on the GPU."""
        nv, out = self.nv, []
        for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                for p in getattr(nv, fn)(self.handle):
                    mem = getattr(p, "usedGpuMemory", None)
                    out.append((int(p.pid), float(mem) / 2**20 if mem else float("nan")))
            except Exception:
                pass
        return out


_nvml = None       # one per engine: nvmlInit once


def _gpu():
    global _nvml
    if _nvml is None:
        try:
            _nvml = _Nvml()
        except Exception as e:   # no package, no driver: the run says so, nothing fails
            _nvml = e
    return None if isinstance(_nvml, Exception) else _nvml


class Sampler:
    """start() before the timed steps, stop() after; ``result()`` is plain data."""

    def __init__(self, device_type: str):
        self.device_type = device_type
        self.gpu = _gpu() if device_type == "cuda" else None
        # GPU columns only where there is a GPU to read: NaN columns would fill a saved run
        keys = SAMPLE_KEYS if self.gpu is not None else SAMPLE_KEYS[:2]
        self.samples = {k: [] for k in keys}
        self._stop = threading.Event()
        self._thread = None
        self.procs_before = self.procs_after = []

    def start(self) -> "Sampler":
        """Record the GPU's processes and a first sample, then sample in a background thread;
        returns the sampler."""
        if self.gpu is not None:
            self.procs_before = self.gpu.processes()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="nbtools-machine", daemon=True)
        self._thread.start()
        return self

    def _loop(self):
        while not self._stop.wait(INTERVAL_S.get(self.device_type, 0.5)):
            self._sample()

    def _sample(self):
        row = dict(ts_ns=time.time_ns(), procs_running=procs_running(), sm_mhz=float("nan"),
                   temp_c=float("nan"), power_w=float("nan"), reasons=0)
        if self.gpu is not None:
            try:
                row.update(self.gpu.sample())
            except Exception:
                pass
        for k in self.samples:
            self.samples[k].append(row[k])

    def stop(self) -> dict:
        """Stop sampling, take a last sample and return ``result()``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)
        self._sample()
        if self.gpu is not None:
            self.procs_after = self.gpu.processes()
        return self.result()

    def result(self) -> dict:
        """What the run keeps of this machine: cores, pid, samples (load, clocks, power), and on
        a GPU its index, clock limit, power limit and the processes that shared it."""
        out = dict(cores=os.cpu_count() or 1, pid=os.getpid(), samples=self.samples,
                   nvml="" if self.gpu is not None or self.device_type != "cuda"
                   else f"NVML unavailable: {_nvml}")
        if self.gpu is not None:
            procs = {pid: mb for pid, mb in self.procs_before + self.procs_after}
            out.update(gpu_index=self.gpu.index, sm_max_mhz=self.gpu.max_sm,
                       power_limit_w=self.gpu.power_limit_w,
                       gpu_procs=[[pid, mb] for pid, mb in sorted(procs.items())])
        return out
