"""Engine side: what the machine is and how to read its signals now. ``HostReader``: the
rank process's CPU and memory and the host's CPU and load (/proc, psutil where there is no
/proc); ``GpuReader``: the GPU this engine sees as cuda:0 through NVML (nvidia-ml-py,
imported lazily: absent on CPU, or without the package or driver, with no error). A reader
returns one float per signal it has (schema/signals.py names them); engine/signals.py
calls them from its sampling thread.

What a device does not report is found out once, when the reader is made: every NVML call
is tried, and a signal whose call raises (NVMLError_NotSupported on a device without that
counter, NoPermission, a driver too old for the function) is left out and named in
``missing`` with NVML's words, so a run says which signals its GPU did not give instead of
drawing an empty lane. NVML's calls go through ctypes' CDLL, which releases the GIL while
the driver answers: the step's thread waits only for the Python lines around them.
"""
from __future__ import annotations

import math
import os
import time

from nbtools.schema import signals as sig

NAN = float("nan")
HOST_WINDOW_S = 0.25     # the host's CPU % over at least this long (25 ticks a core)
LAST_WINDOW_S = 0.08     # ... or this long for the last read, so that a run shorter than a
                         # window still has one (a busy host went unseen on 0.2-s runs)


def procs_running() -> float:
    """Runnable tasks on the host now (/proc/loadavg), NaN where there is no /proc."""
    r = HostReader()
    try:
        return r.running()
    finally:
        r.close()


class HostReader:
    """The rank process's CPU % (CPU time of all its threads per wall time, from
    ``time.process_time``: nanoseconds, not /proc's 10 ms ticks) and resident memory, the
    host's busy cores % and runnable tasks per core. A read is two ``pread`` calls on
    /proc files held open (statm, loadavg; /proc/stat only every ``HOST_WINDOW_S``), a
    few tens of µs; where there is no /proc, psutil gives the memory and the host
    signals are left out (NaN)."""

    names = sig.HOST

    def __init__(self):
        self.cores = os.cpu_count() or 1
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._fd = {k: _open(f"/proc/{k}") for k in ("self/statm", "loadavg", "stat")}
        self._proc = None
        if self._fd["self/statm"] is None:
            try:
                import psutil
                self._proc = psutil.Process()
            except Exception:   # noqa: BLE001 - no memory signal, the rest still reads
                pass
        self._cpu, self._wall = time.process_time(), time.monotonic()
        self._host = (*self._busy(), self._wall)

    def _text(self, key: str) -> str:
        fd = self._fd[key]
        return os.pread(fd, 4096, 0).decode("ascii", "replace") if fd is not None else ""

    def _busy(self) -> tuple:
        """(busy, total) jiffies of all cores from /proc/stat's first line."""
        try:
            v = [float(x) for x in self._text("stat").split("\n", 1)[0].split()[1:]]
            idle = v[3] + (v[4] if len(v) > 4 else 0.0)      # idle + iowait
            total = sum(v[:8])                                # guests are counted in user
            return total - idle, total
        except (OSError, ValueError, IndexError):
            return NAN, NAN

    def running(self) -> float:
        """Runnable tasks on the host now (/proc/loadavg's fourth field, the kernel's
        nr_running, as /proc/stat's procs_running), NaN where there is none."""
        try:
            return float(self._text("loadavg").split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return NAN

    def _rss_mb(self) -> float:
        try:
            if self._fd["self/statm"] is not None:
                return int(self._text("self/statm").split()[1]) * self._page / 2**20
            return self._proc.memory_info().rss / 2**20
        except Exception:   # noqa: BLE001 - a memory read that fails is a gap
            return NAN

    def read(self, last: bool = False) -> list:
        """[cpu_pct, rss_mb, host_cpu_pct, host_load] now (NaN where there is none); the
        ``last`` read of a run takes the host's share over a shorter window."""
        cpu, wall = time.process_time(), time.monotonic()
        pct = 100.0 * (cpu - self._cpu) / (wall - self._wall) if wall > self._wall else NAN
        self._cpu, self._wall = cpu, wall
        host = NAN    # /proc/stat counts 10 ms ticks: read over 0.25 s or more, else none
        b0, t0, w0 = self._host
        if wall - w0 >= (LAST_WINDOW_S if last else HOST_WINDOW_S):
            busy, total = self._busy()
            if total > t0:
                host = 100.0 * (busy - b0) / (total - t0)
                self._host = (busy, total, wall)
        return [pct, self._rss_mb(), host, self.running() / self.cores]

    def close(self) -> None:
        """Close the /proc files."""
        for fd in self._fd.values():
            if fd is not None:
                os.close(fd)
        self._fd = dict.fromkeys(self._fd)


def _open(path: str):
    try:
        return os.open(path, os.O_RDONLY)
    except OSError:
        return None


class _Nvml:
    """One GPU's NVML handle: the device this engine sees as cuda:0, and its limits."""

    def __init__(self):
        import pynvml   # nvidia-ml-py
        pynvml.nvmlInit()
        self.nv = pynvml
        self.handle = self._handle()
        self.max_sm = float(pynvml.nvmlDeviceGetMaxClockInfo(self.handle, pynvml.NVML_CLOCK_SM))
        self.power_limit_w = self._try(
            lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(self.handle) / 1e3)
        self.mem_total_mb = self._try(
            lambda: pynvml.nvmlDeviceGetMemoryInfo(self.handle).total / 2**20)
        self.index = int(pynvml.nvmlDeviceGetIndex(self.handle))

    def _try(self, fn) -> float:
        try:
            return float(fn())
        except self.nv.NVMLError:
            return NAN

    def _handle(self):
        nv = self.nv
        try:   # CUDA_VISIBLE_DEVICES does not apply to NVML: find our device by its UUID
            import torch
            uuid = str(torch.cuda.get_device_properties(0).uuid)
            return nv.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else "GPU-" + uuid)
        except Exception:
            first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
            return nv.nvmlDeviceGetHandleByIndex(int(first) if first.isdigit() else 0)

    def processes(self) -> list:
        """[(pid, used MB)] of compute processes on the GPU."""
        nv, out = self.nv, []
        for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                for p in getattr(nv, fn)(self.handle):
                    mem = getattr(p, "usedGpuMemory", None)
                    out.append((int(p.pid), float(mem) / 2**20 if mem else NAN))
            except Exception:
                pass
        return out


_nvml = None       # one per engine: nvmlInit once


def gpu():
    """This engine's GPU through NVML, or None (no package, no driver: ``nvml_error()``
    says why)."""
    global _nvml
    if _nvml is None:
        try:
            _nvml = _Nvml()
        except Exception as e:   # no package, no driver: the run says so, nothing fails
            _nvml = e
    return None if isinstance(_nvml, Exception) else _nvml


def gave_up(e: BaseException) -> None:
    """NVML answered, but building the GPU reader failed with something not an NVMLError
    (a driver going away raised OSError): the run goes on without GPU signals, and its
    machine report says why (``nvml_error()``)."""
    global _nvml
    _nvml = RuntimeError(f"the GPU reader could not be built: {type(e).__name__}: {e}")


def nvml_error() -> str:
    """Why NVML could not be used on this engine ('' when it could, or was not tried)."""
    return f"NVML unavailable: {_nvml}" if isinstance(_nvml, Exception) else ""


def _value(f) -> float:
    """A c_nvmlFieldValue_t's value as a float, by its valueType."""
    member = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
    t = int(f.valueType)
    return float(getattr(f.value, member[t])) if 0 <= t < len(member) else NAN


class _Fields:
    """Instant power, PCIe and NVLink byte counters in one nvmlDeviceGetFieldValues call;
    the counters become MB/s between two reads (each value carries its own timestamp)."""

    def __init__(self, g: _Nvml, missing: dict):
        nv, h = g.nv, g.handle
        self.nv, self.h = nv, h
        # (signal, field, scope, unit to bytes or W, one link's or the device's)
        want = [(sig.GPU_POWER, getattr(nv, "NVML_FI_DEV_POWER_INSTANT", 186), 0, 1e-3, ""),
                (sig.PCIE_TX, getattr(nv, "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", 197), 0, 1.0, ""),
                (sig.PCIE_RX, getattr(nv, "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", 198), 0, 1.0, "")]
        links = _active_links(nv, h)
        for link in links:                  # data KiB counters, one per active link
            want += [(sig.NVLINK_TX, nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link, 1024.0,
                      "link"),
                     (sig.NVLINK_RX, nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link, 1024.0,
                      "link")]
        if links:                           # newer drivers: byte counters of all links
            want += [(n, getattr(nv, f, fid), 0, 1.0, "all") for n, f, fid in (
                (sig.NVLINK_TX, "NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES", 202),
                (sig.NVLINK_RX, "NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES", 204))]
        got = nv.nvmlDeviceGetFieldValues(h, [(w[1], w[2]) for w in want])
        ok, why = [], {}
        for w, f in zip(want, got):
            if int(f.nvmlReturn) == nv.NVML_SUCCESS:
                ok.append(w)
            else:
                why.setdefault(w[0], str(nv.NVMLError(int(f.nvmlReturn))))
        # one source per NVLink direction: the per-link counters where they answered
        per_link = {w[0] for w in ok if w[4] == "link"}
        self.want = [w for w in ok if not (w[4] == "all" and w[0] in per_link)]
        self.names = list(dict.fromkeys(w[0] for w in self.want))
        for name, reason in why.items():
            if name not in self.names:
                missing[name] = reason
        self._prev = {}

    def read(self) -> list:
        got = self.nv.nvmlDeviceGetFieldValues(self.h, [(w[1], w[2]) for w in self.want])
        out = {n: NAN for n in self.names}
        for (name, fid, scope, unit, _), f in zip(self.want, got):
            if int(f.nvmlReturn) != self.nv.NVML_SUCCESS:
                continue
            v, t_us = _value(f), int(f.timestamp)
            if name == sig.GPU_POWER:
                out[name] = v * unit
                continue
            prev = self._prev.get((fid, scope))
            self._prev[(fid, scope)] = (v, t_us)
            if prev is not None and t_us > prev[1] and v >= prev[0]:
                rate = (v - prev[0]) * unit / (t_us - prev[1])     # bytes per µs = MB/s
                out[name] = rate if math.isnan(out[name]) else out[name] + rate
        return [out[n] for n in self.names]


def _active_links(nv, h) -> list:
    links = []
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            if nv.nvmlDeviceGetNvLinkState(h, link):
                links.append(link)
        except nv.NVMLError as e:
            if isinstance(e, nv.NVMLError_NotSupported) and not links and link == 0:
                break    # no NVLink on this device
            continue     # an unused link, or past the device's last one
    return links


class _Gpm:
    """SM activity, tensor-core activity and DRAM bandwidth between two GPM samples
    (Hopper and newer), taken every ``every``-th read: a GPM sample reads the GPU's
    performance counters, so at a tenth of a second rather than at every read. Its two
    samples live as long as the engine's reader (one per engine)."""

    names = sig.GPM

    def __init__(self, g: _Nvml, every: int):
        nv, h = g.nv, g.handle
        if not nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice:
            raise nv.NVMLError(nv.NVML_ERROR_NOT_SUPPORTED)
        self.nv, self.h, self.every, self.n = nv, h, max(1, every), 0
        self.ids = (nv.NVML_GPM_METRIC_SM_UTIL, nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
                    nv.NVML_GPM_METRIC_DRAM_BW_UTIL)
        self.a, self.b = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
        nv.nvmlGpmSampleGet(h, self.a)
        self._metrics()          # a device that cannot compute them raises here, once

    def read(self) -> list:
        self.n += 1
        return self._metrics() if self.n % self.every == 0 else [NAN] * len(self.names)

    def _metrics(self) -> list:
        nv = self.nv
        nv.nvmlGpmSampleGet(self.h, self.b)
        mg = nv.c_nvmlGpmMetricsGet_t()
        mg.version, mg.numMetrics = nv.NVML_GPM_METRICS_GET_VERSION, len(self.ids)
        mg.sample1, mg.sample2 = self.a, self.b
        for i, m in enumerate(self.ids):
            mg.metrics[i].metricId = m
        nv.nvmlGpmMetricsGet(mg)
        self.a, self.b = self.b, self.a
        return [float(mg.metrics[i].value) if int(mg.metrics[i].nvmlReturn) == nv.NVML_SUCCESS
                else NAN for i in range(len(self.ids))]


def _why(nv, e: Exception) -> str:
    """Why a source gave nothing: NVML's own words, else the exception's kind too."""
    if isinstance(e, nv.NVMLError):
        return str(e) or type(e).__name__
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


class GpuReader:
    """The NVML signals this GPU reports, each source tried once (``missing``: signal -> why
    not). ``read()``: one float per name; a source whose call fails at one read gives NaN
    there (``errors`` counts them)."""

    def __init__(self, g: _Nvml, gpm_every: int = 5):
        nv, h = g.nv, g.handle
        self.g, self.missing, self.errors = g, {}, {}
        reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nv.nvmlDeviceGetCurrentClocksThrottleReasons
        util = (lambda: (lambda u: [float(u.gpu), float(u.memory)])(
            nv.nvmlDeviceGetUtilizationRates(h)))
        sources = [((sig.GPU_UTIL, sig.GPU_MEM_UTIL), util),
                   ((sig.SM_CLOCK,), lambda: [float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))]),
                   ((sig.GPU_TEMP,), lambda: [float(nv.nvmlDeviceGetTemperature(
                       h, nv.NVML_TEMPERATURE_GPU))]),
                   ((sig.GPU_MEM_USED,), lambda: [nv.nvmlDeviceGetMemoryInfo(h).used / 2**20]),
                   ((sig.THROTTLE,), lambda: [float(reasons(h))])]
        try:
            f = _Fields(g, self.missing)
            if f.names:
                sources.append((tuple(f.names), f.read))
        except Exception as e:   # noqa: BLE001 - NVMLError, an older pynvml, a driver gone
            for n in sig.FIELDS:
                self.missing[n] = _why(nv, e)
        if not any(sig.GPU_POWER in names for names, _ in sources):
            sources.append(((sig.GPU_POWER,), lambda: [nv.nvmlDeviceGetPowerUsage(h) / 1e3]))
        self.gpm = None
        try:
            self.gpm = _Gpm(g, gpm_every)
            sources.append((self.gpm.names, self.gpm.read))
        except Exception as e:   # noqa: BLE001 - NVMLError, a pynvml without GPM, ...
            for n in _Gpm.names:
                self.missing[n] = _why(nv, e)
        self.sources = []
        for names, fn in sources:
            try:
                fn()
            except Exception as e:   # noqa: BLE001 - an OSError from a driver going away made
                # every run raise; any failure is that signal missing, said with its reason
                for n in names:
                    self.missing.setdefault(n, _why(nv, e))
                continue
            self.sources.append((names, fn))
        self.names = tuple(n for names, _ in self.sources for n in names)
        for n in self.names:          # power from nvmlDeviceGetPowerUsage where no field gave it
            self.missing.pop(n, None)

    def read(self) -> list:
        """One float per name of ``names``, read now."""
        out = []
        for names, fn in self.sources:
            try:
                out += fn()
            except Exception:   # noqa: BLE001 - one failed read is a NaN, not a lost run
                out += [NAN] * len(names)
                self.errors[names[0]] = self.errors.get(names[0], 0) + 1
        return out
