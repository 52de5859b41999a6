"""Summary tables for people: key columns first, the rest on demand, GPU-only columns
left out on CPU ranks, ints as ints, every header explained, the profiler's overhead only
with its spread."""
import numpy as np
import pandas as pd

from nbtools.analysis import metrics
from nbtools.analysis.summary import profiler_overhead
from nbtools.ui.summary_view import cell, columns, summary_table


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
        assert f"title='{metrics.explain(c)}'".replace("'", "") in html.replace("'", "").replace("&#x27;", "")


def test_every_summary_column_and_cli_abbreviation_is_in_the_registry():
    from nbtools.analysis.step_metrics import PER_RANK_COLUMNS
    for c in PER_RANK_COLUMNS + ["compile_s", "profiler_noise_pct", "items_per_s", "cpu_busy_pct"]:
        assert metrics.explain(c), c
    for abbr in ("cbusy%", "graph%", "overlap%", "recomp", "peak_MB"):
        assert metrics.explain(abbr), abbr


def _gpu_summary(n_ranks=2):
    """Every summary column the registry knows, with GPU-sized values."""
    rng = np.random.default_rng(1)
    data = {"rank": np.arange(n_ranks)}
    for c, m in metrics.METRICS.items():
        if c == "rank":
            continue
        if c in ("device", "host", "cache"):
            data[c] = {"device": "gpu", "host": "gpu-node-17", "cache": "fresh"}[c]
        elif m.unit in ("", "/s") and c not in ("check_max_rel",):
            data[c] = rng.integers(1, 50_000, n_ranks).astype(float)   # counts arrive as floats
        else:
            data[c] = rng.uniform(0.1, 900.0, n_ranks)
    data["profiler_overhead_pct"] = [np.nan, 12.0]
    return pd.DataFrame(data)


def test_report_summary_fits_the_page_and_opens_the_rest(tmp_path):
    """The demo report was 3,694 px wide from 40-column summaries: in Chromium at 1280 px the
    page must not scroll sideways; the rest of the columns open on demand, explained."""
    from playwright.sync_api import sync_playwright

    from support.browser import ARTIFACTS, launch
    from nbtools.report.html import export_html
    from support.runs import synthetic_run

    a, b = synthetic_run(events_per_rank=300, seed=5), synthetic_run(events_per_rank=300, seed=6)
    a.summary, b.summary = _gpu_summary(), _gpu_summary()
    path = export_html(tmp_path / "report.html", [a, b], comparisons=[(a, b)])
    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(path.as_uri(), wait_until="load")
            wide = page.evaluate("() => document.documentElement.scrollWidth")
            assert wide <= 1280, f"the report is {wide} px wide"
            more = page.locator("details.nbtools-more").first
            hidden = more.locator("th", has_text="queue_delay_us_median")
            assert not hidden.is_visible()
            more.locator("summary").click()
            hidden.wait_for(state="visible", timeout=5_000)
            assert "launch on the CPU" in hidden.get_attribute("title")
            assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280, \
                "the opened details made the page scroll sideways"
            # a count is an int, the overhead carries its noise
            cells = page.locator("table.nbtools-tbl").first.inner_text()
            assert ".0\t" not in cells and "± " in cells
            ARTIFACTS.mkdir(exist_ok=True)
            more.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "report_summary_table.png"))
        finally:
            browser.close()
