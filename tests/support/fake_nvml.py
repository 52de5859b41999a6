"""A stand-in for libnvidia-ml.so (this machine has no NVIDIA driver): the C functions the
engine's GPU reader calls, answering through the real pynvml wrappers, so their structs,
by-reference outputs and error classes are pynvml's own; only the library under them is
ours. ``Device`` says what the GPU reports: a function it lacks answers
NVML_ERROR_NOT_SUPPORTED, as a device without that counter does.

    with fake_nvml.installed(fake_nvml.Device(...)) as dev: ...   # pynvml.nvmlLib swapped
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml as nv

OK, NOT_SUPPORTED, LOST = nv.NVML_SUCCESS, nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_GPU_IS_LOST


@dataclass
class Device:
    """What the fake GPU reports. ``clock`` and ``reasons`` may be callables of the seconds
    since it was made (a clock that drops, a power cap that comes)."""
    max_sm: int = 1980
    clock: object = 1980
    reasons: object = 0
    power_mw: int = 420_000
    limit_mw: int = 700_000
    temp: int = 41
    util: tuple = (87, 35)
    mem: tuple = (141 * 2**30, 2 * 2**30)   # total, used
    index: int = 3
    supported: set = field(default_factory=lambda: {
        "util", "fields_power", "fields_pcie", "nvlink", "gpm", "reasons", "power"})
    links: int = 2
    lost: set = field(default_factory=set)   # functions that fail with GPU_IS_LOST now
    # C function name -> an exception it raises (not an NVML return code: a driver going
    # away under ctypes raises OSError)
    raises: dict = field(default_factory=dict)
    calls: dict = field(default_factory=dict)
    t0: float = field(default_factory=time.monotonic)

    def now(self, v):
        return v(time.monotonic() - self.t0) if callable(v) else v


def _out(arg):
    """The object behind a byref() argument."""
    return arg._obj


def library(dev: Device) -> SimpleNamespace:
    def count(name):
        dev.calls[name] = dev.calls.get(name, 0) + 1
        return LOST if name in dev.lost else OK

    def has(what):
        return what in dev.supported

    def init(flags):
        return OK

    def scalar(get, need=None, counted=None):
        """A C function whose last argument is a pointer to one number it fills in."""
        def fn(*args):
            if need is not None and not has(need):
                return NOT_SUPPORTED
            rc = count(counted) if counted else OK
            _out(args[-1]).value = int(get())
            return rc
        return fn

    max_clock = scalar(lambda: dev.max_sm)
    clock = scalar(lambda: dev.now(dev.clock), counted="clock")
    enforced_limit = scalar(lambda: dev.limit_mw)
    power_usage = scalar(lambda: dev.power_mw, need="power")
    index = scalar(lambda: dev.index)
    temperature = scalar(lambda: dev.temp)
    reasons = scalar(lambda: dev.now(dev.reasons), need="reasons")

    def handle_by_index(index, device):
        return OK

    def handle_by_uuid(uuid, device):
        return OK

    def memory(h, out):
        m = _out(out)
        m.total, m.used = dev.mem
        m.free = dev.mem[0] - dev.mem[1]
        return OK

    def utilization(h, out):
        if not has("util"):
            return NOT_SUPPORTED
        u = _out(out)
        u.gpu, u.memory = dev.util
        return OK

    def nvlink_state(h, link, out):
        if not (has("nvlink") or has("nvlink_count")):
            return NOT_SUPPORTED
        if link >= dev.links:
            return nv.NVML_ERROR_INVALID_ARGUMENT
        _out(out).value = 1
        return OK

    def field_values(h, n, values):
        arr = _out(values)
        t_us = time.time_ns() // 1000
        for i in range(n.value):
            f = arr[i]
            f.timestamp = t_us
            fid = int(f.fieldId)
            ok = {nv.NVML_FI_DEV_POWER_INSTANT: has("fields_power"),
                  nv.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: has("fields_pcie"),
                  nv.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: has("fields_pcie"),
                  nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: has("nvlink"),
                  nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: has("nvlink"),
                  nv.NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES: has("nvlink_count"),
                  nv.NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES: has("nvlink_count")}.get(fid, False)
            f.nvmlReturn = OK if ok else NOT_SUPPORTED
            if fid == nv.NVML_FI_DEV_POWER_INSTANT:
                f.valueType, f.value.uiVal = nv.NVML_VALUE_TYPE_UNSIGNED_INT, dev.power_mw
            else:   # counters: 1 GB/s of PCIe (bytes), 2 GiB/s per NVLink (KiB), 3 GB/s of
                # all NVLinks (bytes)
                per_us = {197: 1000.0, 198: 1000.0, 202: 3000.0, 204: 3000.0}.get(fid, 2.0)
                f.valueType = nv.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                f.value.ullVal = int(t_us * per_us) & (2**62 - 1)
        return OK

    def gpm_support(h, out):
        _out(out).isSupportedDevice = 1 if has("gpm") else 0
        return OK

    def gpm_alloc(out):
        return OK

    def gpm_get(h, sample):
        return OK

    def gpm_free(sample):
        return OK

    def gpm_metrics(mg):
        m = _out(mg)
        for i in range(m.numMetrics):
            m.metrics[i].nvmlReturn = OK
            m.metrics[i].value = {nv.NVML_GPM_METRIC_SM_UTIL: 64.0,
                                  nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 20.0,
                                  nv.NVML_GPM_METRIC_DRAM_BW_UTIL: 30.0}[m.metrics[i].metricId]
        return OK

    def processes(h, count, infos):
        _out(count).value = 0
        return OK

    def shutdown():
        return OK

    lib = SimpleNamespace(
        nvmlInitWithFlags=init, nvmlDeviceGetHandleByIndex_v2=handle_by_index,
        nvmlDeviceGetHandleByUUID=handle_by_uuid, nvmlDeviceGetMaxClockInfo=max_clock,
        nvmlDeviceGetClockInfo=clock, nvmlDeviceGetEnforcedPowerLimit=enforced_limit,
        nvmlDeviceGetPowerUsage=power_usage, nvmlDeviceGetMemoryInfo=memory,
        nvmlDeviceGetIndex=index, nvmlDeviceGetUtilizationRates=utilization,
        nvmlDeviceGetTemperature=temperature,
        nvmlDeviceGetCurrentClocksEventReasons=reasons,
        nvmlDeviceGetNvLinkState=nvlink_state, nvmlDeviceGetFieldValues=field_values,
        nvmlGpmQueryDeviceSupport=gpm_support, nvmlGpmSampleAlloc=gpm_alloc,
        nvmlGpmSampleGet=gpm_get, nvmlGpmSampleFree=gpm_free, nvmlGpmMetricsGet=gpm_metrics,
        nvmlDeviceGetComputeRunningProcesses_v3=processes,
        nvmlDeviceGetGraphicsRunningProcesses_v3=processes, nvmlShutdown=shutdown)
    for name, exc in dev.raises.items():
        setattr(lib, name, _raiser(exc))
    return lib


def _raiser(exc):
    def fn(*args):
        raise exc
    return fn


@contextlib.contextmanager
def installed(dev: Device):
    """pynvml talks to ``dev`` inside the block; the engine's cached NVML state is reset on
    the way in and out, so no reader made here outlives it."""
    from nbtools.engine import machine, signals
    saved = nv.nvmlLib
    nv.nvmlLib = library(dev)
    nv._nvmlGetFunctionPointer_cache.clear()
    machine._nvml, signals._gpu_reader = None, None
    try:
        yield dev
    finally:
        nv.nvmlLib = saved
        nv._nvmlGetFunctionPointer_cache.clear()
        machine._nvml, signals._gpu_reader = None, None


