"""An Exploration shown: each A/B's ratio (B over A) with its 95 % interval, one row per
change tried (kept green, refuted grey, failed red), and the HTML a notebook, the panel
and the report show (the verdict, the steps table, the winner's code)."""
from __future__ import annotations

import html

from nbtools.common.units import fmt_range, fmt_ratio
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
        outcome=[r["outcome"] for r in rows], verdict=[r["verdict"] for r in rows],
        # the hover's words from the formatter every table uses ({0.000} read 0.003 as 0.00x)
        ratio_text=[ratio_words(r) for r in rows]))
    span = [v for v in low + high if v] or [1.0]
    lo, hi = min(span + [1.0]), max(span + [1.0])
    pad = (hi / lo) ** 0.15 if hi > lo else 1.1
    p = bfig(y_range=list(reversed(labels)), x_axis_type="log", x_range=(lo / pad, hi * pad),
             height=height or max(140, 60 + 34 * len(labels)), width=width or 720,
             title=title_lines(f"B over A per change tried ({ex.metric}; below 1: faster)",
                               summary_line(ex), (width or 720) - _axis_px(labels)),
             tools="save", toolbar_location="right")
    p.height += 16 * p.title.text.count("\n")       # the title's lines above the same plot
    p.add_layout(Span(location=1.0, dimension="height", line_color="#444",
                      line_dash="dashed"))
    if rows:
        p.add_layout(Whisker(source=src, base="y", lower="low", upper="high",
                             dimension="width", line_color="colour"))
        dots = p.scatter("ratio", "y", source=src, size=10, color="colour")
        p.add_tools(HoverTool(renderers=[dots], tooltips=[
            ("change", "@y"), ("B / A", "@ratio_text"),
            ("verdict", "@verdict"), ("outcome", "@outcome")]))
    p.xaxis.axis_label = "ratio B / A, 95 % interval"
    return p


TITLE_PX = 8.0      # a character of Bokeh's title font (13 px bold), at most
TOOLBAR_PX = 40     # the toolbar on the right of the plot


def _axis_px(labels: list) -> int:
    """The y axis' width left of the frame, where the title starts: its longest label."""
    return int(6.5 * max(map(len, labels), default=0)) + 20


def title_lines(head: str, text: str, width: int) -> str:
    """The plot's title: ``head``, then ``text`` whole, wrapped at words to the ``width``
    right of the y axis (a title cut at the figure's edge read "...B is 1.89x faster (:")."""
    import textwrap
    chars = max(int((width - TOOLBAR_PX) / TITLE_PX), 20)
    return "\n".join([head] + textwrap.wrap(text, chars, break_on_hyphens=False))


def exploration_html(ex) -> str:
    """The verdict (best against start), the steps table, the winner's code."""
    e = html.escape
    v = ex.verdict
    colour = {True: GOOD, False: BAD}.get(v.good, "#444")
    note = f"<p><i>{e(ex.note)}</i></p>" if ex.note else ""
    return (f"<div class='nbtools-exploration'><p><b>explore</b> from <code>"
            f"{e(ex.start.label())}</code>: <span style='color:{colour}'>"
            f"{e(summary_line(ex))}</span></p>{note}"
            f"<p class='nbtools-explore-budget'>{e(ex.budget_text)}</p>{steps_html(ex)}"
            f"<p>the winner as code for your script:</p><pre>{e(ex.code())}</pre></div>")


def ratio_words(row: dict) -> str:
    """B / A and its interval as the verdict's words write them (common/units.py):
    "0.005 (0.00361-0.0068)" beside "200x faster (147-277)", not "0.005 (0.004-0.007)"."""
    ratio = finite(row.get("ratio"))
    if ratio is None:
        return ""
    lo, hi = finite(row.get("low")), finite(row.get("high"))
    return fmt_ratio(ratio) + (f" ({fmt_range(lo, hi)})" if lo is not None and hi is not None
                               else "")


HEADS = ("#", "change", "rule", "screen", "B / A (95 %)", "verdict", "cost", "outcome")


def step_cells(ex) -> list:
    """One tuple of cell texts per change considered (HEADS' columns): what the table shows,
    in HTML or in a picture. The change says what its A/B was judged on where that is not
    step_ms; the outcome carries the row's note (how it was measured)."""
    out = []
    for i, r in enumerate(ex.rows):
        metric = r.get("metric") or "step_ms"
        change = r["change"] + ("" if metric == "step_ms" else f" (judged on {metric})")
        runs, secs = int(r.get("runs") or 0), float(r.get("seconds") or 0.0)
        priced = finite(r.get("cost_s"))
        # a move left untried shows what it would have cost (the price that decided it)
        cost = f"{runs} runs, {secs:.0f} s" if runs else (
            f"would cost ~{priced:.0f} s" if priced is not None else "")
        outcome = r["outcome"] + (f"; {r['note']}" if r.get("note") else "")
        out.append((str(i + 1), change, str(r.get("rule") or ""), r.get("screen") or "",
                    ratio_words(r), r.get("verdict") or "", cost, outcome))
    return out


def steps_html(ex) -> str:
    """The exploration's steps as an HTML table: change, rule, what its screen round read,
    B / A with its interval, the verdict, the runs and seconds it cost (what it would cost,
    where it was left untried), and the outcome (with
    how it was measured, where the lab changed that)."""
    e = html.escape
    head = "".join(f"<th>{h}</th>" for h in HEADS)
    body = [f"<tr><td>{n}</td><td><code>{e(change)}</code></td><td>{e(rule)}</td>"
            f"<td>{e(screen)}</td><td>{num}</td><td>{e(verdict)}</td><td>{cost}</td>"
            f"<td style='color:{COLOURS[_kind(outcome)]}'>{e(outcome)}</td></tr>"
            for n, change, rule, screen, num, verdict, cost, outcome in step_cells(ex)]
    if not body:
        body = [f"<tr><td colspan='8'><i>{e(ex.verdict.text)}</i></td></tr>"]
    return f"<table class='tbl nbtools-steps'><tr>{head}</tr>{''.join(body)}</table>"


def exploration_lines(ex) -> list:
    """The exploration as a static picture says it (ui/picture.py): where it started, its
    verdict, the steps table (a tuple per row), the winner's code."""
    rows = step_cells(ex)
    return ([f"explore from {ex.start.label()}: {summary_line(ex)}", ex.budget_text]
            + ([f"note: {ex.note}"] if ex.note else [])
            + ([HEADS] + rows if rows else [ex.verdict.text])
            + ["the winner as code for your script:"] + ex.code().splitlines())
