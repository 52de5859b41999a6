"""One definition per metric: the registry's rules for combining ranks."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from nbtools import StepConfig
from nbtools.analysis import metrics
from nbtools.analysis.metrics import combine

# -- the rules, on a summary whose ranks differ ---------------------------------------------


def _summary():
    # rank 1 is slower; each rank's items_per_s is its own items per step over its own step
    return pd.DataFrame({
        "rank": [0, 1], "step_ms": [10.0, 20.0], "p90_ms": [12.0, 25.0],
        "items_per_s": [8 / 0.010, 8 / 0.020], "tflops": [1.0, 0.5],
        "compute_ms": [4.0, 8.0], "comm_ms": [1.0, 3.0], "overlap_pct": [100.0, 0.0],
        "recompiles": [0, 2], "peak_mem_mb": [900.0, 1000.0], "last_pct": [100.0, 0.0],
        "compile_state": ["compiled", "compiled"], "mystery": [1.0, 3.0]})


def test_times_counts_and_memory_take_the_largest_rank():
    s = _summary()
    assert combine(s, "step_ms") == 20.0 and combine(s, "p90_ms") == 25.0
    assert combine(s, "recompiles") == 2 and combine(s, "peak_mem_mb") == 1000.0
    assert combine(s, "last_pct") == 100.0          # a mean would be 100 / world, always


def test_a_step_breakdown_is_the_mean_rank_and_overlap_is_weighted_by_comm():
    s = _summary()
    assert combine(s, "compute_ms") == 6.0
    # 1 ms of rank 0's communication overlapped, none of rank 1's 3 ms: 25 % of the run's
    assert combine(s, "overlap_pct") == pytest.approx(25.0)
    assert combine(s.drop(columns="comm_ms"), "overlap_pct") == 50.0


@pytest.mark.parametrize("parallel, items_per_s, tflops", [
    ("ddp", 16 / 0.020, 1.0 * 0.010 / 0.020 + 0.5),    # both ranks' items per slowest step
    ("fsdp2", 16 / 0.020, 1.0 * 0.010 / 0.020 + 0.5),
    ("tp", 8 / 0.020, 1.0 * 0.010 / 0.020 + 0.5),      # one shared batch, FLOPs in shares
    ("none", 8 / 0.010 + 8 / 0.020, 1.5),              # independent ranks: rates add up
    (None, 16 / 0.020, 1.0 * 0.010 / 0.020 + 0.5),     # no config: data parallel
])
def test_throughput_follows_the_parallel_strategy(parallel, items_per_s, tflops):
    scenario = {"ddp": "ddp-train", "fsdp2": "fsdp2-train", "tp": "tp-mlp-infer",
                "none": "ddp-train"}.get(parallel)
    cfg = None if parallel is None else StepConfig(scenario=scenario, parallel=parallel)
    assert combine(_summary(), "items_per_s", cfg) == pytest.approx(items_per_s)
    assert combine(_summary(), "tflops", cfg) == pytest.approx(tflops)


def test_labels_unknown_and_missing_columns():
    s = _summary()
    assert math.isnan(combine(s, "compile_state"))            # a label has no run number
    assert combine(s, "mystery") == 2.0                         # unknown: the mean
    assert math.isnan(combine(s, "graph_coverage_pct"))         # not measured
    assert math.isnan(combine(s.iloc[:0], "step_ms"))
    assert math.isnan(combine(s.assign(step_ms=np.nan), "items_per_s"))


def test_every_listed_metric_is_defined_and_combinable():
    for surface in (metrics.COMPARED, metrics.TABLE, metrics.CLI, metrics.HISTORY):
        for c in surface:
            m = metrics.METRICS[c]
            assert m.combine in ("max", "mean", "rate") and metrics.explain(c), c
    for m in metrics.METRICS.values():
        assert m.combine in ("max", "mean", "rate", "") and m.better in ("lower", "higher", "")
        assert not m.weight or m.weight in metrics.METRICS
    assert metrics.ABBREVIATIONS["cbusy%"] == "compute_busy_pct"
    assert metrics.explain("items/s").startswith("items_per_s")
