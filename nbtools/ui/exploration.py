"""An Exploration shown: each A/B's ratio (B over A) with its 95 % interval, one row per
change tried (kept green, refuted grey, failed red), and the HTML a notebook, the panel
and the report show (the verdict, the steps table, the winner's code)."""
from __future__ import annotations

import html
from nbtools.results.exploration import KEPT, finite, summary_line
from nbtools.ui.summary_view import BAD, GOOD

COLOURS = {"kept": GOOD, "failed": BAD, "other": "#777777"}


def _kind(outcome: str) -> str:
    return "kept" if outcome == KEPT else "failed" if outcome.startswith("failed") else "other"


def figure(ex, width=None, height=None):
    """A Bokeh figure: x the ratio (log axis, 1 = no change, left of it faster), a row per
    change that has a ratio, a whisker over its interval."""
    from bokeh.models import ColumnDataSource, HoverTool, Span, Whisker
    from bokeh.plotting import figure as bfig
    rows = [r for r in ex.rows if finite(r.get("ratio")) is not None]
    labels = [f"{i + 1}. {r['change']}" for i, r in enumerate(rows)] or ["(no A/B)"]
    ratio = [finite(r["ratio"]) for r in rows]
    low = [finite(r["low"]) or finite(r["ratio"]) for r in rows]
    high = [finite(r["high"]) or finite(r["ratio"]) for r in rows]
    src = ColumnDataSource(dict(
        y=labels[:len(rows)], ratio=ratio, low=low, high=high,
        colour=[COLOURS[_kind(r["outcome"])] for r in rows],
        outcome=[r["outcome"] for r in rows], verdict=[r["verdict"] for r in rows]))
    span = [v for v in low + high if v] or [1.0]
    lo, hi = min(span + [1.0]), max(span + [1.0])
    pad = (hi / lo) ** 0.15 if hi > lo else 1.1
    p = bfig(y_range=list(reversed(labels)), x_axis_type="log", x_range=(lo / pad, hi * pad),
             height=height or max(140, 60 + 34 * len(labels)), width=width or 720,
             title=f"B over A per change tried ({ex.metric}; below 1: faster) — "
                   + summary_line(ex)[:90], tools="save", toolbar_location="right")
    p.add_layout(Span(location=1.0, dimension="height", line_color="#444",
                      line_dash="dashed"))
    if rows:
        p.add_layout(Whisker(source=src, base="y", lower="low", upper="high",
                             dimension="width", line_color="colour"))
        dots = p.scatter("ratio", "y", source=src, size=10, color="colour")
        p.add_tools(HoverTool(renderers=[dots], tooltips=[
            ("change", "@y"), ("B / A", "@ratio{0.000} (@low{0.000}-@high{0.000})"),
            ("verdict", "@verdict"), ("outcome", "@outcome")]))
    p.xaxis.axis_label = "ratio B / A, 95 % interval"
    return p


def exploration_html(ex) -> str:
    """The verdict (best against start), the steps table, the winner's code."""
    e = html.escape
    v = ex.verdict
    colour = {True: GOOD, False: BAD}.get(v.good, "#444")
    note = f"<p><i>{e(ex.note)}</i></p>" if ex.note else ""
    return (f"<div class='nbtools-exploration'><p><b>explore</b> from <code>"
            f"{e(ex.start.label())}</code>: <span style='color:{colour}'>"
            f"{e(summary_line(ex))}</span></p>{note}{steps_html(ex)}"
            f"<p>the winner as code for your script:</p><pre>{e(ex.code())}</pre></div>")


HEADS = ("#", "change", "rule", "B / A (95 %)", "verdict", "outcome")


def step_cells(ex) -> list:
    """One tuple of cell texts per A/B (HEADS' columns): what the table shows, in HTML or in
    a picture."""
    out = []
    for i, r in enumerate(ex.rows):
        ratio = finite(r.get("ratio"))
        lo, hi = finite(r.get("low")), finite(r.get("high"))
        num = "" if ratio is None else f"{ratio:.3f}" + (
            f" ({lo:.3f}-{hi:.3f})" if lo is not None and hi is not None else "")
        out.append((str(i + 1), r["change"], str(r.get("rule") or ""), num,
                    r.get("verdict") or "", r["outcome"]))
    return out


def steps_html(ex) -> str:
    """The exploration's steps as an HTML table: change, rule, B / A with its interval,
    verdict and outcome per A/B."""
    e = html.escape
    head = "".join(f"<th>{h}</th>" for h in HEADS)
    body = [f"<tr><td>{n}</td><td><code>{e(change)}</code></td><td>{e(rule)}</td>"
            f"<td>{num}</td><td>{e(verdict)}</td>"
            f"<td style='color:{COLOURS[_kind(outcome)]}'>{e(outcome)}</td></tr>"
            for n, change, rule, num, verdict, outcome in step_cells(ex)]
    if not body:
        body = ["<tr><td colspan='6'><i>nothing to try: the start run's advice changes no "
                "field</i></td></tr>"]
    return f"<table class='tbl nbtools-steps'><tr>{head}</tr>{''.join(body)}</table>"


def exploration_lines(ex) -> list:
    """The exploration as a static picture says it (ui/picture.py): where it started, its
    verdict, the steps table (a tuple per row), the winner's code."""
    rows = step_cells(ex)
    return ([f"explore from {ex.start.label()}: {summary_line(ex)}"]
            + ([f"note: {ex.note}"] if ex.note else [])
            + ([HEADS] + rows if rows else ["nothing to try: the start run's advice changes "
                                            "no field"])
            + ["the winner as code for your script:"] + ex.code().splitlines())
