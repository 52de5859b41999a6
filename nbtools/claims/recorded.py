"""The profiles recorded on 2 x H200 that ship with the package, as Runs (claim notebooks
read them beside a lab's own runs)."""
from __future__ import annotations

from nbtools.common.package_data import h200_traces_dir
from nbtools.results.load import load_traces


def recorded_h200() -> dict:
    """Profiles recorded on 2 x H200 (torch 2.11, NCCL 2.28.9; tp-mlp-infer, batch 1, 8
    blocks of d=4096, 3 profiled steps; written by benchmarks/gpu/check_assumptions.py and
    shipped in the package as nbtools/data/h200), loaded as Runs: {"off": eager,
    "reduce-overhead": graph replay}. They have timelines but no lab summary (step_ms)."""
    folder = h200_traces_dir()
    out = {}
    for mode in ("off", "reduce-overhead"):
        files = sorted(folder.glob(f"tp_{mode}_rank*.json.gz"))
        if not files:
            raise FileNotFoundError(f"no tp_{mode}_rank*.json.gz in {folder}: the package was "
                                    "installed without its data; reinstall torch-nbtools")
        out[mode] = load_traces(files)
    return out
