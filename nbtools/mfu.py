"""Model FLOPs utilisation: a run's achieved TFLOP/s (summary ``tflops``, from the
workload's FLOPs per step) over the device's dense peak for the dtype the matmuls ran in."""
from __future__ import annotations

# Dense (no sparsity) peak TFLOP/s from the vendors' datasheets. fp32 is without TF32:
# PyTorch's default (torch.backends.cuda.matmul.allow_tf32 = False).
PEAK_TFLOPS = {
    "H200": {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0},
    "H100": {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0},
    "A100": {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},
}


def peak_tflops(device_name: str, dtype: str) -> float:
    """The table's peak for a device name as torch reports it ("NVIDIA H200"); NaN when
    the device is not in the table (CPUs among them)."""
    for key, peaks in PEAK_TFLOPS.items():
        if key in (device_name or ""):
            return peaks.get(dtype, float("nan"))
    return float("nan")


def mfu(run) -> "object":
    """Per-rank MFU (0..1) of a run: its summary's tflops over the peak of the ranks' GPU in
    the autocast dtype (fp32 when autocast is off). NaN on CPU ranks."""
    dtype = run.config.autocast if run.config.autocast != "off" else "fp32"
    peak = peak_tflops(run.env.get("gpu", ""), dtype)
    return run.summary.set_index("rank")["tflops"] / peak
