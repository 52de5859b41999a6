"""Parts beside their whole as a person reads them: on every surface that shows a step's
parts (compute_ms, exposed_comm_ms, idle_ms) the column right before them is the whole they
fit in (profiled_window_ms, the profiled steps' mean window), and the numbers as printed
add up inside it. Seen before: ddp-train on CPU, profiled=3, 17 of 20 rank rows read
compute + exposed + idle above profiled_step_ms (a median) beside them, and the summary's
"all columns" table showed the parts with no window at all. Real 2-rank gloo runs."""
from __future__ import annotations

import dataclasses
import html
import re

import pytest

from nbtools import StepConfig

pytestmark = pytest.mark.slow

LAB = "shared"     # the worker's lab (tests/conftest.py)
WHOLE = "profiled_window_ms"
ADDED = ("compute_ms", "exposed_comm_ms", "idle_ms")     # disjoint parts of the window
PARTS = ("compute_ms", "comm_ms", "memcpy_ms", "exposed_comm_ms", "idle_ms")


def _cells(fragment: str, tag: str) -> list:
    return [html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
            for c in re.findall(rf"<{tag}\b[^>]*>(.*?)</{tag}>", fragment, re.S)]


def html_tables(page: str) -> list:
    """Each <table> of a page as (header cells, [row cells]); a row's first <th> (a metric
    table's row name) counts as a cell."""
    out = []
    for t in re.findall(r"<table\b.*?</table>", page, re.S):
        rows = re.findall(r"<tr\b.*?</tr>", t, re.S)
        if not rows:
            continue
        head = _cells(rows[0], "th")
        body = [_cells(re.sub(r"<th\b", "<td", r).replace("</th>", "</td>"), "td")
                for r in rows[1:]]
        out.append((head, body))
    return out


def _name(header: str) -> str:
    """'profiled_window_ms (mean)' -> 'profiled_window_ms'; a CLI short name to its column."""
    from nbtools.analysis.metrics import ABBREVIATIONS
    word = header.split(" (")[0].strip()
    return ABBREVIATIONS.get(word, word)


def _value(text: str) -> tuple[float, float]:
    """A printed number and how far rounding may have moved it (half its last digit)."""
    t = text.replace(",", "").replace("×", "").strip()
    if not re.fullmatch(r"-?\d+(\.\d+)?", t):
        raise AssertionError(f"not a plain number: {text!r}")
    decimals = len(t.split(".")[1]) if "." in t else 0
    return float(t), 0.5 * 10 ** -decimals


def check_columns(head: list, rows: list, where: str) -> int:
    """A table with parts as columns: the whole right before the first part, and each
    row's printed compute + exposed + idle inside its printed whole. Returns rows checked."""
    names = [_name(h) for h in head]
    shown = [n for n in names if n in PARTS]
    if not shown:
        return 0
    assert WHOLE in names, f"{where}: parts {shown} shown without {WHOLE}: {head}"
    first = min(names.index(p) for p in shown)
    assert names[first - 1] == WHOLE, \
        f"{where}: the column before the parts is {head[first - 1]!r}, not the whole: {head}"
    assert "median" not in head[first - 1], head
    checked = 0
    for row in rows:
        cell = dict(zip(names, row))
        if any(cell.get(c, "—") in ("—", "-", "") for c in (WHOLE, *ADDED)):
            continue
        whole, slack = _value(cell[WHOLE])
        total = 0.0
        for c in ADDED:
            v, e = _value(cell[c])
            total, slack = total + v, slack + e
        assert total <= whole + slack, (where, row, f"{total} > {whole}")
        checked += 1
    return checked


def check_rows(head: list, rows: list, where: str) -> int:
    """A table with one row per metric (A/B comparisons): per value column, the parts'
    printed values inside the whole's, and the whole's row right before the parts'."""
    names = [r[0] for r in rows]
    shown = [n for n in names if n in PARTS]
    if not shown:
        return 0
    assert WHOLE in names and names.index(WHOLE) == min(names.index(p) for p in shown) - 1, \
        f"{where}: {WHOLE} is not the row right before the parts: {names}"
    by = {r[0]: r for r in rows}
    checked = 0
    for k, col in enumerate(head[1:], start=1):
        if col not in ("a", "b"):
            continue
        whole, slack = _value(by[WHOLE][k])
        total = 0.0
        for c in ADDED:
            v, e = _value(by[c][k])
            total, slack = total + v, slack + e
        assert total <= whole + slack, (where, col, f"{total} > {whole}")
        checked += 1
    return checked


def text_columns(table: str) -> list:
    """The CLI table's rank rows as (header, rows) of whitespace-split cells."""
    lines = table.splitlines()
    head = lines[0].split()[:-1]            # the last header is "status"
    rows = [ln.split()[:len(head)] for ln in lines[2:]
            if re.match(r"\s*(\d+|all)\s", ln)]
    return head, rows


@pytest.fixture(scope="module")
def pair(lab):
    cfg = StepConfig(scenario="ddp-train", warmup=2, steps=4, profiled=3)
    a, b = lab.run(cfg), lab.run(cfg)
    assert a.ok and b.ok and (a.summary["comm_ms"] > 0).all()    # gloo: not vacuous
    return a, b


def test_every_table_shows_the_whole_the_parts_fit_in(lab, pair, tmp_path):
    from nbtools import export_html, tutorial as X
    from nbtools.cli.table import format_table
    from nbtools.ui.html import comparison_html, run_html
    a, b = pair
    # run.summary itself: the whole right before its parts, the parts inside it per rank
    cols = list(a.summary.columns)
    assert cols.index(WHOLE) == min(cols.index(p) for p in PARTS if p in cols) - 1, cols
    for _, r in a.summary.iterrows():
        assert r[list(ADDED)].sum() <= r[WHOLE] + 1e-9
    ranks = len(a.summary)
    # the summary tables of a cell, the panel and the report (the details table too)
    for where, page, runs in (("run in a cell", run_html(a), 1),
                              ("report", export_html(tmp_path / "r.html", [a, b]).read_text(),
                               2)):
        tables = [t for t in html_tables(page) if t[0] and _name(t[0][0]) == "rank"]
        assert len(tables) == 2 * runs, where            # key columns and "all columns"
        # every rank of every run, its parts in one table with their whole (the key
        # columns; the details table shows none of them, or they would be checked too)
        assert sum(check_columns(h, rows, where) for h, rows in tables) == runs * ranks
    # A/B: a row per metric, both sides
    cmp = lab.compare(a, b)
    table = next(t for t in html_tables(comparison_html(cmp)) if t[0][:1] == ["metric"]
                 and any(r[0] == WHOLE for r in t[1]))
    assert check_rows(*table, "comparison") == 2
    # the CLI: a lab run's table shows no parts; traces from a person's own job show the
    # profiled step and its parts (metrics.TRACE_CLI), each rank and the run's own row
    assert check_columns(*text_columns(format_table([a])), "CLI") == 0
    trace_like = dataclasses.replace(a, config=None, source="traces")
    assert check_columns(*text_columns(format_table([trace_like])), "CLI") == ranks + 1
    # the notebooks' table, as notebook 05 asked for it: the parts beside step_ms alone
    t = X.table(a, ["step_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "idle_ms"],
                per_rank=True, fields=[])
    assert check_columns(*html_tables(X.shown(t).to_html())[0], "X.table") == ranks


# -- NaN steps reach the verdict -----------------------------------------------------
def finite_step(ctx):
    import torch
    return torch.ones(4).sum()


def nan_step(ctx):
    import torch
    return torch.ones(4).sum() * float("nan")


STEPS = dict(warmup=1, steps=3, profiled=0)


def test_a_side_whose_steps_return_nan_gets_a_verdict_that_says_so(lab):
    cmp = lab.ab((finite_step, STEPS), (nan_step, STEPS), rounds=2)
    failed = [r.first_error() for r in cmp.runs_a + cmp.runs_b if not r.ok]
    assert not failed, failed                         # NaN is no failure: times exist
    text = cmp.verdict.text
    assert "B's step returned NaN (ranks 0, 1; 4 of 4 runs)" in text, text
    assert "A's step returned" not in text
    assert any(c.startswith("B's step returned NaN") for c in cmp.verdict.caveats)
    # two single runs (lab.compare, the panel's one-round Compare): the same words
    one = lab.compare(cmp.runs_b[0], cmp.runs_a[0])
    assert "A's step returned NaN (ranks 0, 1; its last measured step)" in one.verdict.text
    assert "B's step returned" not in one.verdict.text
    # every metric's verdict carries it, so the table's rows are read with it
    assert "A's step returned NaN" in one.verdict_on("p90_ms").text
