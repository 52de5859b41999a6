"""The machine's signals: each one's name, spelled here once, and what it is (label, unit,
the scale a lane draws it on, where it comes from); the samples table's columns; the key the
engines' live messages travel under. engine/machine.py reads the signals under these names,
engine/signals.py samples and sends them, analysis/samples.py turns them into
``run.samples``, and the timeline's lanes, the panel's live strip, the summary columns
(analysis/machine.py) and docs/timeline.md read ``SIGNALS``."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# the names (the samples table's ``signal`` column, run.json's old runs mapped onto them)
GPU_UTIL = "gpu_util_pct"
SM_ACTIVE = "sm_active_pct"
TENSOR_ACTIVE = "tensor_active_pct"
DRAM_BW = "dram_bw_pct"
GPU_MEM_UTIL = "gpu_mem_util_pct"
SM_CLOCK = "sm_clock_mhz"
GPU_POWER = "gpu_power_w"
GPU_TEMP = "gpu_temp_c"
GPU_MEM_USED = "gpu_mem_used_mb"
THROTTLE = "throttle"
PCIE_TX = "pcie_tx_mbps"
PCIE_RX = "pcie_rx_mbps"
NVLINK_TX = "nvlink_tx_mbps"
NVLINK_RX = "nvlink_rx_mbps"
CPU = "cpu_pct"
RSS = "rss_mb"
HOST_CPU = "host_cpu_pct"
HOST_LOAD = "host_load"

# what each of the engine's readers gives, in the order its read() returns them
HOST = (CPU, RSS, HOST_CPU, HOST_LOAD)          # /proc (engine/machine.py HostReader)
GPM = (SM_ACTIVE, TENSOR_ACTIVE, DRAM_BW)       # NVML GPM, Hopper and newer
FIELDS = (GPU_POWER, PCIE_TX, PCIE_RX, NVLINK_TX, NVLINK_RX)   # nvmlDeviceGetFieldValues

KEY = "nbtools_signals"   # the live samples' data message (engine/progress.py's channel)

SAMPLE_COLUMNS = {
    "rank": np.int32,
    "ts_ns": np.int64,    # epoch ns on the rank, the events' clock
    "signal": "str",      # a name of SIGNALS
    "value": np.float64,  # in the signal's unit (a read that gave nothing leaves no row)
}


@dataclass(frozen=True)
class Signal:
    """One signal: ``name`` (the table's), ``label`` and ``unit`` for people, ``scale``: the
    value a lane's full height stands for (a number, the name of a value the rank's machine
    report holds, e.g. "sm_max_mhz", or "" for the row's own largest value), and what it
    ``means`` (where it comes from)."""
    name: str
    label: str
    unit: str
    scale: object
    means: str
    live: bool = False        # shown in the panel's live strip


SIGNALS = (
    Signal(GPU_UTIL, "GPU busy", "%", 100.0, "share of NVML's last sample period (1/6 "
           "to 1 s, by product) in which a kernel ran (nvidia-smi's utilization.gpu)", True),
    Signal(SM_ACTIVE, "SM activity", "%", 100.0, "share of the SMs busy between two "
           "samples (NVML GPM, Hopper and newer): a kernel on few SMs reads low here and "
           "high in GPU busy"),
    Signal(TENSOR_ACTIVE, "tensor cores", "%", 100.0, "share of time the SMs ran "
           "tensor-core instructions between two samples (NVML GPM)"),
    Signal(DRAM_BW, "DRAM bandwidth", "%", 100.0, "DRAM bandwidth used between two "
           "samples, of the device's peak (NVML GPM)"),
    Signal(GPU_MEM_UTIL, "memory busy", "%", 100.0, "share of NVML's last sample period "
           "in which device memory was read or written"),
    Signal(SM_CLOCK, "SM clock", "MHz", "sm_max_mhz", "the SM clock now (NVML)", True),
    Signal(GPU_POWER, "power", "W", "power_limit_w", "board power draw (NVML: the "
           "instant reading where the device has one, else its power usage)", True),
    Signal(GPU_TEMP, "temperature", "°C", 100.0, "GPU core temperature (NVML)"),
    Signal(GPU_MEM_USED, "GPU memory used", "MB", "gpu_mem_total_mb", "device memory "
           "in use by every process on the GPU (NVML), not only PyTorch's allocations"),
    Signal(THROTTLE, "clock reasons", "", 1.0, "NVML's clock event reasons as a bit mask "
           "(power cap, thermal or hardware slowdown, power brake, ...): the lane marks the "
           "samples with a throttling reason"),
    Signal(PCIE_TX, "PCIe out", "MB/s", "", "bytes sent over PCIe since the last "
           "sample (NVML counters)"),
    Signal(PCIE_RX, "PCIe in", "MB/s", "", "bytes received over PCIe since the last "
           "sample (NVML counters)"),
    Signal(NVLINK_TX, "NVLink out", "MB/s", "", "data bytes sent over the GPU's active "
           "NVLinks since the last sample (NVML counters)"),
    Signal(NVLINK_RX, "NVLink in", "MB/s", "", "data bytes received over the GPU's "
           "active NVLinks since the last sample (NVML counters)"),
    Signal(CPU, "process CPU", "%", "", "CPU time of the rank's process (all its "
           "threads) since the last sample, per wall time: 100 = one core busy", True),
    Signal(RSS, "process memory", "MB", "", "resident memory of the rank's process"),
    Signal(HOST_CPU, "host CPU", "%", 100.0, "share of all the host's cores busy, every "
           "process counted (/proc/stat, over 0.25 s or more: it counts 10 ms ticks)"),
    Signal(HOST_LOAD, "runnable tasks now", "/core", "", "tasks runnable on the host at the "
           "instant of each sample, per core (/proc/loadavg's running count over the cores; "
           "not uptime's load, a minute's average; the lab's own ranks count): above 1 a "
           "thread waits for a core"),
)
BY_NAME = {s.name: s for s in SIGNALS}
