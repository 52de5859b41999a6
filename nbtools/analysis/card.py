"""The GPU a run ran on, by its own numbers: name, SMs, compute capability and clocks as the
engine read them (torch's device properties, NVML), and the datasheet peaks that a kernel
reading is held against. Pure: a run's env and rank reports in."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from nbtools.common.units import finite_or_nan

# Dense (no sparsity) peak TFLOP/s from the vendors' datasheets, SXM parts. fp32 is the
# CUDA cores' rate (PyTorch's default: no TF32 for matmuls); tf32 the tensor cores'.
PEAK_TFLOPS = {
    "H200": {"bf16": 989.0, "fp16": 989.0, "tf32": 494.0, "fp32": 67.0, "fp8": 1979.0},
    "H100": {"bf16": 989.0, "fp16": 989.0, "tf32": 494.0, "fp32": 67.0, "fp8": 1979.0},
    "A100": {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5},
    "L4": {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3, "fp8": 242.0},
    "A10": {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2},
    "V100": {"fp16": 125.0, "fp32": 15.7},
    "T4": {"fp16": 65.0, "fp32": 8.1},
}


def peak_tflops(device_name: str, dtype: str) -> float:
    """The table's peak for a device name as torch reports it ("NVIDIA H200"); NaN when
    the device or the dtype is not in the table (CPUs among them)."""
    return _peaks(device_name).get(dtype, math.nan)


def _peaks(device_name: str) -> dict:
    # "A10" must not match "NVIDIA A100-SXM4-80GB", nor "L4" an L40S
    for key, peaks in PEAK_TFLOPS.items():
        if re.search(rf"\b{key}(?![0-9])", device_name or ""):
            return peaks
    return {}


@dataclass(frozen=True)
class Card:
    """One rank's GPU. NaN/0 where the engine could not read a number."""
    name: str
    sms: int = 0
    cc: tuple = ()                       # compute capability, (9, 0) for Hopper
    max_sm_mhz: float = math.nan
    mem_bw_gbs: float = math.nan         # peak DRAM bandwidth from NVML's memory clock and bus
    peaks: dict = field(default_factory=dict)

    @property
    def has_bf16(self) -> bool:
        """Tensor cores that run bf16: Ampere (8.0) and newer. Unknown capability: by the
        datasheet table."""
        if self.cc:
            return tuple(self.cc) >= (8, 0)
        return "bf16" in self.peaks

    @property
    def half(self) -> str:
        """The 16-bit dtype to propose on this card: bf16 where it runs, else fp16."""
        return "bf16" if self.has_bf16 else "fp16"

    @property
    def text(self) -> str:
        """The card in a line: name, SMs, clock, DRAM peak and the datasheet peaks."""
        bits = [f"{self.sms} SMs" if self.sms else "",
                f"SM clock up to {self.max_sm_mhz:,.0f} MHz" if self.max_sm_mhz == self.max_sm_mhz else "",
                f"DRAM {self.mem_bw_gbs:,.0f} GB/s peak" if self.mem_bw_gbs == self.mem_bw_gbs else ""]
        peaks = ", ".join(f"{v:g} {k}" for k, v in self.peaks.items() if k in ("fp32", "tf32", self.half))
        s = self.name + (f" ({', '.join(b for b in bits if b)})" if any(bits) else "")
        return s + (f"; datasheet peak TFLOP/s: {peaks}" if peaks else "")


def card(run) -> Card | None:
    """The run's GPU (its first GPU rank's), None on CPU ranks."""
    env = run.env if isinstance(run.env, dict) else {}
    name = str(env.get("gpu") or "")
    if not name:
        return None
    m = {}
    for rep in (run.ranks or {}).values():
        if isinstance(rep, dict) and isinstance(rep.get("machine"), dict):
            m = rep["machine"]
            break
    mem_mhz, bus = finite_or_nan(m.get("mem_max_mhz")), finite_or_nan(m.get("mem_bus_bits"))
    cc = env.get("gpu_cc")
    try:
        cc = tuple(int(x) for x in str(cc).split(".")) if cc else ()
    except ValueError:
        cc = ()
    peaks = _peaks(name)
    sms = finite_or_nan(env.get("gpu_sms"))
    return Card(name=name, sms=int(sms) if sms == sms else 0, cc=cc, max_sm_mhz=finite_or_nan(m.get("sm_max_mhz")),
                # DDR: two transfers a clock over the bus (H100 SXM: 2 x 2619 MHz x 640 B)
                mem_bw_gbs=2 * mem_mhz * bus / 8 / 1e3 if mem_mhz > 0 and bus > 0 else math.nan,
                peaks=dict(peaks))
