"""Summary tables for people: key columns first, the rest on demand, GPU-only columns
left out on CPU ranks, ints as ints, every header explained, the profiler's overhead only
with its spread."""
import numpy as np
import pandas as pd

from nbtools import glossary
from nbtools.summary import profiler_overhead
from nbtools.summary_view import cell, columns, summary_table


def _steps(per_rank):
    rows = []
    for r, (meas, prof) in enumerate(per_rank):
        for phase, vals in (("measured", meas), ("profiled", prof)):
            rows += [dict(rank=r, step=0, phase=phase, ts_ns=0, dur_ns=int(v * 1e6)) for v in vals]
    return pd.DataFrame(rows)


def test_overhead_only_when_it_stands_out_of_the_noise():
    o = profiler_overhead(_steps([
        ([10, 14, 9, 12, 11], [30]),          # one profiled step within reach of noise? no: far out
        ([10, 14, 9, 12, 11], [13]),          # inside the measured steps' range: noise
        ([10, 10.1, 10.2, 10.1], [8.0]),      # faster when profiled: noise, never negative
        ([10, 11], [20]),                     # 2 measured steps: the spread is unknown
    ])).set_index("rank")
    assert o.loc[0, "profiler_overhead_pct"] > 100
    assert np.isnan(o.loc[1, "profiler_overhead_pct"]) and o.loc[1, "profiler_noise_pct"] > 5
    assert np.isnan(o.loc[2, "profiler_overhead_pct"])
    assert np.isnan(o.loc[3, "profiler_overhead_pct"]) and np.isnan(o.loc[3, "profiler_noise_pct"])
    rows = o.reset_index().assign(step_ms=10.0).to_dict("records")
    shown = [cell("profiler_overhead_pct", r["profiler_overhead_pct"], r) for r in rows]
    assert shown[0].startswith("+") and "±" in shown[0]
    assert shown[1].startswith("within noise (±") and shown[2].startswith("within noise")
    assert shown[3].startswith("n/a")


def _cpu_summary():
    return pd.DataFrame({
        "rank": [0, 1], "step_ms": [12.5, 13.25], "p90_ms": [14.0, 15.0],
        "profiler_overhead_pct": [np.nan, np.nan], "profiler_noise_pct": [7.0, 9.0],
        "compiles": [1.0, 1.0], "recompiles": [0, 0], "gpu_busy_pct": [np.nan, np.nan],
        "graph_coverage_pct": [np.nan, np.nan], "graph_kernels": [0, 0], "cudagraph_skips": [0, 0],
        "peak_mem_mb": [np.nan, np.nan], "compute_busy_pct": [80.0, 75.0], "device": ["cpu", "cpu"],
        "exposed_comm_ms": [0.5, 0.75], "kernels": [0, 0], "cpu_busy_pct": [90.0, 91.0],
        "rss_mb": [812.3, 815.9]})


def test_cpu_table_leaves_out_gpu_columns_and_explains_the_rest():
    s = _cpu_summary()
    key, rest = columns(s)
    for gpu_only in ("gpu_busy_pct", "graph_coverage_pct", "graph_kernels", "cudagraph_skips",
                     "peak_mem_mb", "kernels"):
        assert gpu_only not in key + rest
    assert key[:3] == ["rank", "step_ms", "p90_ms"] and "exposed_comm_ms" in key
    assert "rss_mb" in rest and "cpu_busy_pct" in rest and "rss_mb" not in key
    html = summary_table(s)
    assert "gpu_busy_pct" not in html and "cudagraph" not in html
    assert "<details" in html                     # the rest on demand
    assert ">1<" in html and "1.0" not in html    # a count prints as an int
    assert "within noise (±7 %)" in html
    # every header shown carries its explanation as a tooltip
    for c in key + rest:
        assert f"title='{glossary.explain(c)}'".replace("'", "") in html.replace("'", "").replace("&#x27;", "")


def test_every_summary_column_and_cli_abbreviation_is_in_the_glossary():
    from nbtools.analysis import PER_RANK_COLUMNS
    for c in PER_RANK_COLUMNS + ["compile_s", "profiler_noise_pct", "items_per_s", "cpu_busy_pct"]:
        assert glossary.explain(c), c
    for abbr in ("cbusy%", "graph%", "overlap%", "recomp", "peak_MB"):
        assert glossary.explain(abbr), abbr
