"""A run's summary as a table for people: key columns first and the rest behind a details
toggle, counts as integers, units in the headers, every header explained on hover (from
the metric registry, analysis/metrics.py), GPU-only columns left out when every rank ran on
CPU, and the profiler's overhead shown only with its spread. One renderer for the panel,
the report and a Run in a notebook. Plain HTML strings from DataFrames; no widgets, no bokeh.
"""
from __future__ import annotations

import html
import math

import numpy as np
import pandas as pd

from nbtools.analysis import metrics
from nbtools.common import units

_STYLE = ("<style>.nbtools-tbl{border-collapse:collapse;font-size:12px;margin:4px 0}"
          ".nbtools-tbl th,.nbtools-tbl td{border:1px solid #ddd;padding:2px 6px;text-align:right;"
          "white-space:nowrap}.nbtools-tbl th{background:#f4f4f4;cursor:help}"
          ".nbtools-tbl td:first-child,.nbtools-tbl th:first-child{text-align:left}</style>")


def on_cpu(summary: pd.DataFrame) -> bool:
    """Every rank measured on CPU (the timeline's device column, else no GPU numbers)."""
    if "device" in summary and len(summary):
        return bool((summary["device"].astype(str) == "cpu").all())
    gpu = [c for c in ("gpu_busy_pct", "peak_mem_mb") if c in summary]
    return bool(gpu) and bool(summary[gpu].isna().all().all())


def columns(summary: pd.DataFrame) -> tuple[list, list]:
    """(key columns, the rest): the registry's order, GPU-only ones dropped on CPU, columns that
    say nothing (all empty) dropped, unknown columns kept at the end of the rest."""
    cpu = on_cpu(summary)
    known = [c for c in metrics.METRICS if c in summary.columns]
    extra = [c for c in summary.columns if c not in metrics.METRICS]
    keep = [c for c in known + extra
            if c == "rank" or not ((cpu and metrics.kind(c) in ("gpu", "gpukey"))
                                   or _says_nothing(summary, c))]
    key = [c for c in keep if metrics.kind(c) in ("key", "gpukey") or c == "rank"]
    # a step's parts stand in one table with the whole they fit in, right after it (the
    # key table showed exposed communication, the details compute and idle beside the
    # profiled steps' median: no table let a person add them up)
    wholes = [w for w in metrics.PARTS_OF if w in key]
    key += [c for c in keep if c not in key and any(c in metrics.PARTS_OF[w] for w in wholes)]
    rest = [c for c in keep if c not in key]
    return metrics.beside_whole(key, keep), metrics.beside_whole(rest, keep)


def _says_nothing(summary: pd.DataFrame, c: str) -> bool:
    if c == "profiler_overhead_pct" and "profiler_noise_pct" in summary:
        c = "profiler_noise_pct"      # NaN overhead with a known noise reads "within noise"
    return bool(summary[c].isna().all())


def cell(col: str, value, row=None) -> str:
    """One value as text (common/units.py, the words every surface uses): counts whole,
    other numbers to three significant figures (never e-notation), the profiler's overhead
    with its noise (or 'within noise')."""
    if col == "profiler_overhead_pct" and row is not None:
        noise = row.get("profiler_noise_pct")
        if _nan(noise):
            return "n/a (< 3 measured steps)" if not _nan(row.get("step_ms")) else "—"
        if _nan(value):
            return f"within noise (±{units.fmt_number(noise, 2)} %)"
        return f"+{units.fmt_number(value, 2)} % ± {units.fmt_number(noise, 2)} %"
    if value is None or _nan(value):
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, np.integer)) or (isinstance(value, float) and value.is_integer()
                                                 and metrics.is_count(col)):
        return units.fmt_count(value)      # a count per profiled step (syncs) may be 2.5
    if isinstance(value, (float, np.floating)):
        return units.fmt_number(value)
    return str(value)


def _nan(v) -> bool:
    try:
        return v is None or (isinstance(v, float) and math.isnan(v)) or pd.isna(v)
    except (TypeError, ValueError):
        return False


def title(col: str) -> str:
    """A summary column's name as a table heads it: with the statistic over steps where two
    columns of one step differ by it (step_ms is a median of the measured steps,
    profiled_window_ms a mean of the profiled ones) and the unit where the name lacks it."""
    u = metrics.unit(col)
    m = metrics.METRICS.get(col)
    said = [m.stat] if m is not None and m.stat else []
    # the unit is already in names like step_ms; say it where it is not
    if u and not col.endswith(("_" + u, "_pct", "_mb", "_s", "_us_median")):
        said.append(u)
    return f"{col} ({', '.join(said)})" if said else col


def header(col: str) -> str:
    """A summary column's header cell: its ``title`` and what it means as the tooltip."""
    return (f"<th title='{html.escape(metrics.explain(col), quote=True)}'>"
            f"{html.escape(title(col))}</th>")


def table(summary: pd.DataFrame, cols: list) -> str:
    """The summary's rows as an HTML table of ``cols``."""
    rows = summary.to_dict("records")
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell(c, row.get(c), row))}</td>"
                                    for c in cols) + "</tr>" for row in rows)
    return (f"<table class='nbtools-tbl'><tr>{''.join(header(c) for c in cols)}</tr>"
            f"{body}</table>")


def summary_table(summary: pd.DataFrame) -> str:
    """Key columns, then every other column behind a toggle; a note when GPU columns were
    left out."""
    if not len(summary):
        return ""
    key, rest = columns(summary)
    out = _STYLE + f"<div style='overflow-x:auto'>{table(summary, key)}</div>"
    if rest:
        out += (f"<details class='nbtools-more'><summary>all columns ({len(rest)} more)"
                f"</summary><div style='overflow-x:auto'>{table(summary, ['rank'] + rest)}"
                "</div></details>")
    if on_cpu(summary):
        out += ("<div style='color:#666;font-size:11px'>CPU ranks: GPU-only columns "
                "(GPU busy, CUDA-graph counts and coverage, copies, peak GPU memory) are left "
                "out. Hover a header for what it means.</div>")
    else:
        out += "<div style='color:#666;font-size:11px'>Hover a header for what it means.</div>"
    return out


def metric_rows(rows, value_cols) -> str:
    """A table with one row per metric (``rows``: (metric, {column: value}) pairs), each
    metric explained on hover with how its ranks were combined, its values formatted as the
    summary's are, and a change coloured by whether it is better or worse only where the row
    says ``resolved`` (its interval excludes no change; column ``interval`` shows ``low``-
    ``high``). A row without a verdict is never coloured: one run a side is no evidence."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ["metric"] + list(value_cols))
    body = []
    for metric, values in rows:
        how = metrics.how(metric)
        tip = html.escape(metrics.explain(metric) + (f" · a run's number: {how}" if how else ""),
                          quote=True)
        ok = values.get("resolved") is True or values.get("resolved") is np.True_
        cells = "".join(f"<td{_colour(c, metric, v) if ok else ''}>"
                        f"{html.escape(_signed(c, metric, v, values))}</td>"
                        for c, v in ((c, values.get(c)) for c in value_cols))
        body.append(f"<tr><th title='{tip}'>{html.escape(metric)}</th>{cells}</tr>")
    return _STYLE + f"<table class='nbtools-tbl'><tr>{head}</tr>{''.join(body)}</table>"


GOOD, BAD = "#1a7f37", "#a40000"


def _signed(col: str, metric: str, value, values=None) -> str:
    if col == "interval":
        lo, hi = (values or {}).get("low"), (values or {}).get("high")
        return units.fmt_range(lo, hi) + ("×" if not (_nan(lo) or _nan(hi)) else "")
    text = cell(metric, value)
    if col == "delta" and not _nan(value) and value > 0:
        return "+" + text
    if col == "ratio" and not _nan(value):
        return units.fmt_ratio(value) + "×"
    return text


def _colour(col: str, metric: str, value) -> str:
    """Green where B improved on A, red where it got worse, for metrics with a direction."""
    way = metrics.better(metric)
    if col != "delta" or not way or _nan(value) or value == 0:
        return ""
    good = (value > 0) == (way == "higher")
    return f" style='color:{GOOD if good else BAD}'"


def text_rows(summary: pd.DataFrame) -> list:
    """The key columns as rows of cells, the header first (a static picture's copy of the
    table: ui/picture.py lines the cells up)."""
    if not len(summary):
        return []
    key, _ = columns(summary)
    return [tuple(title(c) for c in key)] + [tuple(cell(c, row.get(c), row) for c in key)
                           for row in summary.to_dict("records")]


def picture_header(run) -> list:
    """What the panel's static picture says above its timeline: the run, its whole config
    (the fields not at their defaults), its flags and the summary's key columns."""
    cfg = run.config
    lines = [f"run {run.label} · {run.world_size} ranks · {len(run.events):,} events"]
    if cfg is not None:
        changed = cfg.label().split(" ")[1:]
        lines.append(f"config: scenario={cfg.scenario} " + (" ".join(changed) or "(defaults)"))
    return lines + [f"flag: {f}" for f in run.flags or ()] + text_rows(run.summary)


COMPARED = ("a", "b", "delta", "ratio", "interval")


def comparison_lines(cmp) -> list:
    """A comparison as a static picture says it (ui/picture.py): the pair, the verdict, the
    compared metrics (a tuple per row, their numbers as the panel's table shows them)."""
    v = cmp.verdict
    rows = [(m,) + tuple(_signed(c, m, r.get(c), r) for c in COMPARED)
            for m, r in ((r["metric"], r) for r in cmp.table.to_dict("records"))]
    return ([f"compare: A {cmp.a.label} vs B {cmp.b.label}",
             f"verdict ({v.metric}, B over A, 95 % interval): {v.text}"]
            + ([("metric",) + COMPARED] + rows if rows else []))
