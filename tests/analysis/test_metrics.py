"""One definition per metric: the registry's rules for combining ranks, and one real A/B
pair on a 2-rank gloo lab showing the same numbers on every surface (Comparison.table, a
notebook cell, the panel, table(), the CLI table, the exported report, the history)."""
from __future__ import annotations

import math
import re

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
        assert m.combine in ("max", "min", "mean", "rate", "") and m.better in ("lower", "higher", "")
        assert not m.weight or m.weight in metrics.METRICS
    assert metrics.ABBREVIATIONS["cbusy%"] == "compute_busy_pct"
    assert metrics.explain("items/s").startswith("items_per_s")


# -- one real A/B pair, every surface --------------------------------------------------------

RUN = dict(scenario="ddp-train", warmup=1, steps=5, profiled=2)


@pytest.fixture(scope="module")
def pair(lab):
    a = lab.run(StepConfig(batch=4, **RUN))
    b = lab.run(StepConfig(batch=8, **RUN))
    assert a.ok and b.ok, (a.errors, b.errors)
    return lab, a, b


def _reference(lab, a, b) -> dict:
    """metric -> (A, B) from Comparison.table, the numbers before any rounding."""
    t = lab.compare(a, b).table
    return {r["metric"]: (r["a"], r["b"]) for r in t.to_dict("records")}


def _html_rows(text: str) -> dict:
    """The first metric table of an HTML comparison: metric -> (A, B) as shown."""
    first = text.split("<table", 2)[1]
    rows = re.findall(r"<tr><th title='[^']*'>([^<]+)</th><td[^>]*>([^<]*)</td>"
                      r"<td[^>]*>([^<]*)</td>", first)
    return {m: (_shown(x), _shown(y)) for m, x, y in rows}


def _shown(text: str) -> float:
    text = text.replace(",", "").strip()
    return math.nan if text in ("—", "-", "") else float(text)


def _html_close(shown: float, value: float) -> bool:
    """summary_view.cell: 3 significant digits below 100, whole numbers above."""
    if math.isnan(value):
        return math.isnan(shown)
    return abs(shown - value) <= max(5e-3 * abs(value), 0.5 if abs(value) >= 99.5 else 0) + 1e-9


def _cli_rows(text: str) -> list:
    """The "all" rows of format_table: one {metric: value} per run, in order."""
    lines = text.splitlines()
    labels = lines[0].split()[1:-1]        # after "rank", before "status"
    names = [metrics.ABBREVIATIONS.get(h, h) for h in labels]
    assert names == list(metrics.CLI)
    rows = []
    for line in lines[2:]:
        cells = line.split()        # a run's label has a line of its own, above its rows
        if cells and cells[0] == "all":
            rows.append(dict(zip(names, map(_shown, cells[1:1 + len(names)]))))
    return rows


_CLI_DIGITS = {"ms": 3, "s": 2, "%": 1, "MB": 0, "/s": 0, "": 0}


def _cli_close(metric: str, shown: float, value: float) -> bool:
    if math.isnan(value):
        return math.isnan(shown)
    return abs(shown - value) <= 0.5 * 10 ** -_CLI_DIGITS[metrics.unit(metric)] + 1e-9


@pytest.mark.slow
def test_the_ranks_differ_so_a_combine_shows(pair):
    _, a, b = pair
    for run in (a, b):
        s = run.summary
        assert len(s) == 2 and s["step_ms"].nunique() == 2
        # data parallel: the run's throughput is near twice a rank's (less by how far the
        # ranks' step times lie apart: on 2 shared cores up to 40 %), so a surface that took
        # one rank or the mean instead is off by more than any surface's rounding
        rate, rates = combine(s, "items_per_s", run.config), s["items_per_s"]
        assert all(rate > 1.02 * r for r in (rates.max(), rates.mean())), (rate, rates)
        # ddp-train's workload does not give its FLOPs: no TFLOP/s, not a measured-looking 0
        assert s["tflops"].isna().all(), s["tflops"].tolist()
    assert "tflops" not in pair[0].compare(a, b).table["metric"].tolist()


@pytest.mark.slow
def test_every_surface_shows_the_same_numbers(pair, tmp_path):
    from nbtools import export_html
    from nbtools.cli.main import format_table
    from nbtools.lab.sweeps import table
    from nbtools.ui.html import comparison_html

    lab, a, b = pair
    ref = _reference(lab, a, b)
    assert {"step_ms", "p90_ms", "items_per_s", "exposed_comm_ms", "overlap_pct"} <= set(ref)

    cmp = lab.compare(a, b)
    report = export_html(tmp_path / "ab.html", [a, b], comparisons=[(a, b)])
    page = report.read_text(encoding="utf-8")
    shown = {"notebook cell": _html_rows(cmp._repr_html_()),
             "panel": _html_rows(comparison_html(cmp)),
             "report": _html_rows(page[page.index("<h2>A/B comparisons</h2>"):])}
    for surface, rows in shown.items():
        assert set(rows) == set(ref), surface
        for m, (va, vb) in ref.items():
            assert _html_close(rows[m][0], va) and _html_close(rows[m][1], vb), \
                (surface, m, rows[m], (va, vb))

    t = table([a, b])
    listed = [c for c in metrics.TABLE if c in ref]
    assert len(listed) >= 8
    for c in listed:
        assert t[c].tolist() == pytest.approx([ref[c][0], ref[c][1]], nan_ok=True), c

    cli = _cli_rows(format_table([a, b]))
    assert len(cli) == 2
    listed = [c for c in metrics.CLI if c in ref]
    assert len(listed) >= 6
    for c in listed:
        for row, value in zip(cli, ref[c]):
            assert _cli_close(c, row[c], value), ("cli", c, row[c], value)

    h = lab.history.table.set_index("run")
    for c in metrics.HISTORY:
        assert [h.loc[r.run_id, c] for r in (a, b)] == pytest.approx(list(ref[c])), c
