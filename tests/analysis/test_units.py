"""Numbers in words, from one home (common/units.py), where each surface makes them: the
cases a careful first-day user met (issue 44) - a ratio "0.00x" beside "294x faster",
"0.005 (0.004-0.007)" beside "147-277", compiles 1.41 and recompiles 0.5 over rounds,
"1.75e+04 ms", "median of 1 cold starts", "workload None None None None" - each checked
on the text the surface prints."""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from nbtools import StepConfig
from nbtools.common import units
from nbtools.results.comparison import Comparison
from nbtools.results.run import Run


@pytest.mark.parametrize("v, text", [
    (0, "0"), (0.012345, "0.0123"), (1.5, "1.5"), (10.63, "10.6"), (123.4, "123"),
    (999.6, "1,000"), (17493.2, "17,493"), (-2.5, "-2.5"), (3e-5, "<0.0001"),
    (float("nan"), "not measured"), (None, "not measured"), (math.inf, "infinite")])
def test_numbers_have_three_figures_and_never_e_notation(v, text):
    assert units.fmt_number(v) == text


@pytest.mark.parametrize("v, text", [
    (1.0412, "1.04"), (294.4, "294"), (1040.0, "1,040"), (0.0034, "0.0034"),
    (0.00342, "0.00342"), (0.5, "0.50"), (5e-6, "<0.0001"), (float("nan"), "—")])
def test_ratios(v, text):
    assert units.fmt_ratio(v) == text


def test_ranges_counts_times_and_percentages():
    assert units.fmt_range(0.91, 1.1) == "0.91-1.10"
    assert units.fmt_range(-3.0, 5.0, units.fmt_number) == "-3 to 5"
    assert units.fmt_count(3.0) == "3" and units.fmt_count(12345) == "12,345"
    assert units.fmt_count(1, "cold start") == "1 cold start"
    assert units.fmt_count(3, "cold start") == "3 cold starts"
    assert units.fmt_count(2, ("graph break", "graph breaks")) == "2 graph breaks"
    assert units.fmt_count(1.5, "compile") == "1.5 compiles on average"
    assert [units.fmt_ms(v) for v in (0.00085, 0.052, 10.63, 17493.0)] == \
        ["850 ns", "52 µs", "10.6 ms", "17.5 s"]
    assert units.fmt_s(0.25) == "250 ms" and units.fmt_pct(4.1, signed=True) == "+4.1 %"
    assert units.fmt_column(17493.1234, "ms") == "17493.123"     # a script reads it back
    assert units.fmt_column(float("nan"), "ms") == "-"


# -- where each number is made ------------------------------------------------------------
def test_a_large_speed_up_reads_the_same_in_its_ratio_and_its_verdict():
    from nbtools.ui.exploration import steps_html
    from nbtools.ui.summary_view import metric_rows

    class Ex:
        rows = [dict(change="compile=default", rule="r", ratio=0.0034, low=0.00361,
                     high=0.0068, verdict="B is 294x faster (147-277, 5 rounds)",
                     outcome="kept")]

    page = steps_html(Ex())
    assert "<td>0.0034 (0.00361-0.0068)</td>" in page, page     # was 0.003 (0.004-0.007)
    row = metric_rows([("step_ms", dict(a=294.0, b=1.0, delta=-293.0, ratio=0.0034,
                                        low=0.00361, high=0.0068, resolved=True))],
                      ("a", "b", "delta", "ratio", "interval"))
    assert ">0.0034×</td>" in row and ">0.00361-0.0068×</td>" in row, row  # was 0.00×


def _run(cfg, compiles, recompiles, step_ms):
    s = pd.DataFrame({"rank": [0, 1], "step_ms": [step_ms, step_ms * 1.01],
                      "compiles": [compiles, compiles], "recompiles": [recompiles, 0]})
    return Run(config=cfg, summary=s)


def test_counts_over_rounds_stay_whole():
    a_cfg, b_cfg = StepConfig(), StepConfig(compile="default")
    # A B B A rounds: the second B reuses the first's graphs (fresh cache per config)
    runs_a = [_run(a_cfg, 0, 0, 10.0 + i) for i in range(4)]
    runs_b = [_run(b_cfg, c, r, 5.0 + i) for i, (c, r) in enumerate(
        [(1, 0), (2, 1), (1, 0), (2, 0)])]
    cmp = Comparison.from_rounds(runs_a, runs_b)
    t = cmp.table.set_index("metric")
    assert t.loc["compiles", "b"] == 2 and t.loc["recompiles", "b"] == 1   # was 1.41, 0.25
    from nbtools.ui.html import compared_html
    page = compared_html(cmp)
    row = re.search(r">compiles</th>(.*?)</tr>", page).group(1)
    assert re.findall(r"<td[^>]*>([^<]*)</td>", row)[:2] == ["0", "2"]
    assert "counts: the most any of its runs had" in page


def test_a_step_of_seconds_is_not_said_in_e_notation():
    from nbtools.analysis.summary import flags
    s = pd.DataFrame({"rank": [0, 1], "step_ms": [17493.0, 25012.0],
                      "p10_ms": [17000.0, 24000.0], "p90_ms": [18000.0, 26000.0]})
    said = flags(s, {0: {}, 1: {}}, None, None)
    assert any("17,493 .. 25,012 ms" in f for f in said), said      # was 1.75e+04 .. 2.5e+04


def test_the_reports_environment_leaves_out_what_was_not_recorded(tmp_path):
    from nbtools import export_html
    runs = [Run(config=StepConfig(), env={"workload": None, "torch": "2.13",
                                          "world_size": 2}) for _ in range(4)]
    page = export_html(tmp_path / "r.html", runs).read_text()
    env = page[page.index("<h2>Environment</h2>"):page.index("<h2>Runs</h2>")]
    assert "None" not in env and "workload" not in env and "2.13" in env


def test_the_timeline_bar_names_its_whole_apart_from_step_ms():
    from nbtools.ui.timeline.data import summary_data
    s = pd.DataFrame({"rank": [0], "step_ms": [10.6], "profiled_window_ms": [20.6],
                      "compute_ms": [12.0], "exposed_comm_ms": [3.0], "idle_ms": [2.0],
                      "comm_ms": [4.0]})
    text = summary_data(s, [0])["text"][0]
    assert text.startswith("profiled step 20.6 ms (mean)"), text       # was "step 20.6 ms"


def test_the_notebooks_numbers():
    from nbtools import tutorial as X
    assert X.num(17493.0) == "17,493" and X.num(np.float64(0.5)) == "0.5"
    df = pd.DataFrame({"rank": [0], "gpu_busy_pct": [np.nan], "cpu_busy_pct": [91.912345],
                       "compiles": [2.0]})
    page = X.shown(df).to_html()
    assert "91.9<" in page and "91.912345" not in page and "nan" not in page.lower()
    assert ">2<" in page
