"""ui: the GPU-waits lane: under the streams, one row per GPU rank with every gap in its GPU
work (analysis/idle.py) on the timeline's x axis, coloured by why the GPU waited: host wait
(the next kernel was not launched yet), kernel wait (launch gaps under 30 us), other. Hover:
the gap's length, the kernel that ended it and, for host wait, where the launching thread
was. Renderers are named ``waits-...``; hidden for runs without GPU ranks."""
from __future__ import annotations

import numpy as np
from bokeh.models import ColumnDataSource, HoverTool, Legend, LegendItem

from nbtools.analysis.idle import CAUSE_WORDS, gaps
from nbtools.ui.timeline.lane import Lane

KINDS = {"host_wait": ("host wait", "#8c564b"), "kernel_wait": ("kernel wait", "#ffbb78"),
         "other": ("other", "#9e9e9e")}
FIELDS = ("left", "right", "y", "colour", "kind", "ms", "next", "host", "rank")
MAX_NAME = 80
TITLE = "why the GPU waits: every gap in its work, by what ended it"
MAX_GAPS = 3000
"""Per rank, the longest gaps drawn (the shortest are under a pixel at any zoom that shows
the rest; a million-event run has hundreds of thousands): the row's label says so."""


def waits_data(events, ranks: list, t0: int) -> tuple[dict, dict]:
    """(the gaps' source columns, the row labels {row: text} and under "title" the
    figure's title with each rank's totals) of a run's events."""
    out = {k: [] for k in FIELDS}
    g = gaps(events) if events is not None and len(events) else None
    if g is None or not len(g):
        return out, {}
    rows = {r: i for i, r in enumerate(sorted(set(g["rank"].tolist()) & set(ranks)))}
    g = g[g["rank"].isin(list(rows))]
    totals = g.groupby(["rank", "kind"])["dur_ns"].sum() / 1e6
    counts = g.groupby("rank").size()
    g = g.sort_values("dur_ns", ascending=False, kind="stable").groupby(
        "rank", sort=False).head(MAX_GAPS).sort_index()
    kind = g["kind"].to_numpy(object)
    host = np.where(kind == "host_wait", [
        f"{CAUSE_WORDS.get(h, h)} ({100 * s:.0f} % of the gap)" if h else ""
        for h, s in zip(g["host"].tolist(), g["host_share"].tolist())], "")
    out = dict(left=(g["ts_ns"].to_numpy() - t0) / 1e6,
               right=(g["ts_ns"].to_numpy() + g["dur_ns"].to_numpy() - t0) / 1e6,
               y=g["rank"].map(rows).to_numpy(float),
               colour=np.array([KINDS[k][1] for k in kind], object),
               kind=np.array([KINDS[k][0] for k in kind], object),
               ms=np.array([f"{d / 1e6:.3g} ms" for d in g["dur_ns"].tolist()], object),
               next=np.array([_short(str(n)) for n in g["next"].tolist()], object),
               host=host, rank=g["rank"].to_numpy())
    # short row labels: the lanes of one column share the widest label's room, and a long
    # one here narrowed the streams' plot; the totals go in the title
    labels = {i: f"r{r} GPU waits" for r, i in rows.items()}
    said = []
    for r in list(rows)[:4]:
        t = totals.get(r, {})
        said.append(f"r{r} host {t.get('host_wait', 0):.3g} ms, kernel "
                    f"{t.get('kernel_wait', 0):.3g}, other {t.get('other', 0):.3g}"
                    + (f" (longest {MAX_GAPS:,} of {int(counts[r]):,} gaps drawn)"
                       if counts[r] > MAX_GAPS else ""))
    labels["title"] = TITLE + " · " + " · ".join(said) + (" · ..." if len(rows) > 4 else "")
    return out, labels


def _short(name: str) -> str:
    return name if len(name) <= MAX_NAME else name[:MAX_NAME - 1] + "…"


class WaitsLane(Lane):
    """One figure on the timeline's x range; ``update`` replaces its data."""

    def __init__(self, size: dict, backend: str, x_range):
        self.source = ColumnDataSource({k: [] for k in FIELDS})
        super().__init__(size, backend, x_range, name="waits-lane", height=90, title=TITLE)
        fig = self.figure
        bars = fig.hbar(y="y", left="left", right="right", height=0.7, fill_color="colour",
                        line_color="colour", line_width=1, source=self.source,
                        name="waits-gaps")
        fig.add_tools(HoverTool(renderers=[bars], tooltips=[
            ("rank", "@rank"), ("", "@kind, @ms"), ("then", "@next"),
            ("the host was in", "@host")]))
        nan = dict(y=[np.nan], left=[np.nan], right=[np.nan], height=0.7, line_color=None)
        fig.add_layout(Legend(items=[LegendItem(label=label, renderers=[
            fig.hbar(fill_color=colour, **nan)]) for label, colour in KINDS.values()],
            orientation="horizontal", label_text_font_size="8pt", glyph_width=14, spacing=4,
            padding=2, margin=2), "above")

    def update(self, events, ranks: list, t0: int) -> None:
        """Redraw for ``ranks`` from ``t0``; hidden when no rank's GPU had a gap."""
        self.source.data, labels = waits_data(events, ranks, t0)
        self.figure.title.text = labels.pop("title", TITLE)
        self.show_rows(labels, len(labels), 22)
