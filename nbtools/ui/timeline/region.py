"""ui: the region table: drag the box-select tool over a time range and a table lists what
the range holds, by name or category and rank: how many events overlap it, the time they
spend inside it (clipped to the range) beside their whole durations; the range stays shaded.

Counted from the events themselves, not the drawn boxes (a merged box holds events outside
the range, and which merge depends on the zoom): the page carries every event's rank, name,
category, start and duration (``region_events``) for runs of up to ``MAX_REGION_EVENTS``
events; past that it counts the drawn boxes and says so. ``region_table`` is the Python
twin of REGION_JS (tests).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from bokeh.models import (BoxAnnotation, BoxSelectTool, ColumnDataSource, CustomJS, DataTable,
                          Div, RadioButtonGroup, TableColumn)

from nbtools.schema.tables import CATEGORIES, string_codes
from nbtools.ui.timeline.interactions import FMT_JS

MAX_REGION_EVENTS = 100_000      # about 1.5 MB in an exported page
REGION_FIELDS = ("rank", "name_i", "cat_i", "start", "dur")


def region_events(events: pd.DataFrame | None, t0: int) -> dict:
    """Every event for the region table: rank, ``name_i`` (codes into the events' names, as
    the timeline's names source), ``cat_i`` (into CATEGORIES, -1 other), start and
    duration in ms since ``t0``. Empty past MAX_REGION_EVENTS."""
    if events is None or not len(events) or len(events) > MAX_REGION_EVENTS:
        return dict(rank=np.zeros(0, np.int16), name_i=np.zeros(0, np.int32),
                    cat_i=np.zeros(0, np.int8), start=np.zeros(0), dur=np.zeros(0, np.float32))
    codes, _ = string_codes(events["name"])
    ccodes, ccats = string_codes(events["category"])
    known = np.array([CATEGORIES.index(c) if c in CATEGORIES else -1 for c in ccats] + [-1])
    # a duration in float32 keeps 7 significant figures (a 100 ms op to 6 ns), which a start
    # on the run's clock would not: half its bytes (0.1 MB of a 22-run report's 2.9 MB)
    return dict(rank=events["rank"].to_numpy(np.int16), name_i=codes.astype(np.int32),
                cat_i=known[ccodes].astype(np.int8),
                start=(events["ts_ns"].to_numpy(np.int64) - t0) / 1e6,
                dur=(events["dur_ns"].to_numpy(np.int64) / 1e6).astype(np.float32))


def region_table(events: pd.DataFrame, t0: int, x0: float, x1: float,
                 by: str = "name") -> pd.DataFrame:
    """What the range [x0, x1] (ms since ``t0``) holds, per ``by`` (name or category) and
    rank: count (events overlapping it, touching included), in_ns (time inside it), whole_ns
    (their full durations). Sorted as the page sorts: most time in the range first."""
    s = (events["ts_ns"].to_numpy(np.int64) - t0) / 1e6
    e = s + events["dur_ns"].to_numpy(np.int64) / 1e6
    hit = (e >= x0) & (s <= x1)
    ev = events[hit]
    inside = np.clip(np.minimum(e[hit], x1) - np.maximum(s[hit], x0), 0, None) * 1e6
    t = pd.DataFrame({"what": ev[by].astype(str).to_numpy(), "rank": ev["rank"].to_numpy(),
                      "in_ns": inside, "whole_ns": ev["dur_ns"].to_numpy(np.float64)})
    out = t.groupby(["what", "rank"]).agg(count=("in_ns", "size"), in_ns=("in_ns", "sum"),
                                          whole_ns=("whole_ns", "sum")).reset_index()
    key = out.groupby("what")["in_ns"].transform("sum")
    return out.assign(_k=-key).sort_values(["_k", "what", "rank"]).drop(columns="_k") \
        .reset_index(drop=True)


REGION_JS = FMT_JS + """
const g = range.data.x0.length ? [range.data.x0[0], range.data.x1[0]] : null;
shade.visible = !!g;
if (g) { shade.left = g[0]; shade.right = g[1]; }
if (!g) { table.visible = false; out.text = ""; return; }
const byName = group.active === 0, E = evs.data, exact = E.start.length > 0;
const rows = {}, ranks = new Set();
let n = 0;
const add = (key, r, c, inside, whole) => {
  const k = key + "\\u0000" + r;
  const row = rows[k] || (rows[k] = {what: key, rank: r, count: 0, in_ns: 0, whole_ns: 0});
  row.count += c; row.in_ns += inside; row.whole_ns += whole; n += c; ranks.add(r);
};
if (exact) {
  for (let i = 0; i < E.start.length; i++) {
    const s = E.start[i], e = s + E.dur[i];
    if (e < g[0] || s > g[1]) continue;
    const key = byName ? (names.data.name[E.name_i[i]] ?? "") : cats[E.cat_i[i]] ?? "other";
    add(key, E.rank[i], 1, Math.max(0, Math.min(e, g[1]) - Math.max(s, g[0])) * 1e6,
        E.dur[i] * 1e6);
  }
} else {          // too many events for the page: the drawn boxes, their busy time spread
  const d = ev.data;
  for (let i = 0; i < d.left.length; i++) {
    if (d.right[i] < g[0] || d.left[i] > g[1]) continue;
    const key = byName ? (names.data.name[d.name_i[i]] ?? "") : cats[d.cat_i[i]] ?? "other";
    const span = d.right[i] - d.left[i];
    const busy = d.count[i] > 1 ? d.busy_ns[i] : Math.round(span * 1e6);
    const part = span > 0 ? (Math.min(d.right[i], g[1]) - Math.max(d.left[i], g[0])) / span : 1;
    add(key, d.rank[i], d.count[i], busy * Math.max(0, part), busy);
  }
}
const keyTotal = {};
for (const r of Object.values(rows)) keyTotal[r.what] = (keyTotal[r.what] || 0) + r.in_ns;
const list = Object.values(rows).sort((a, b) => keyTotal[b.what] - keyTotal[a.what]
  || String(a.what).localeCompare(String(b.what)) || a.rank - b.rank).slice(0, 500);
table.source.data = {what: list.map(r => r.what), rank: list.map(r => r.rank),
  count: list.map(r => r.count), inside: list.map(r => fmt(r.in_ns)),
  whole: list.map(r => fmt(r.whole_ns)), mean: list.map(r => fmt(r.whole_ns / r.count)),
  in_ns: list.map(r => r.in_ns), whole_ns: list.map(r => r.whole_ns)};
table.visible = n > 0;
const at = v => v.toLocaleString("en-US", {minimumFractionDigits: 3, maximumFractionDigits: 3});
out.text = `Region ${at(g[0])} to ${at(g[1])} ms (${fmt((g[1] - g[0]) * 1e6)}, shaded): ` +
  `<b>${n}</b> events on ${ranks.size} rank(s) overlap it. "in range": their time inside ` +
  `it; "whole": their full durations` + (exact ? "" : ` · counted from the drawn boxes ` +
  `(this run has more events than the page carries): zoom in for exact counts`);
"""


class RegionTable:
    """The box-select tool, the shaded range, the by-name/by-category switch, the table."""

    def __init__(self, fig, events_source, events_renderer, names_source, size: dict):
        fig.add_tools(BoxSelectTool(dimensions="width", renderers=[events_renderer],
                                    description="Region: select a time range to sum what it holds"))
        cols = [TableColumn(field="what", title="name / category", width=330),
                TableColumn(field="rank", title="rank", width=45),
                TableColumn(field="count", title="events", width=60),
                TableColumn(field="inside", title="in range", width=85),
                TableColumn(field="whole", title="whole", width=85),
                TableColumn(field="mean", title="mean (whole)", width=90)]
        self.table = DataTable(
            source=ColumnDataSource(dict(what=[], rank=[], count=[], inside=[], whole=[], mean=[],
                                         in_ns=[], whole_ns=[])),
            columns=cols, height=220, index_position=None, visible=False,
            name="region-table", **size)
        self.out = Div(text="", name="region-summary")
        self.group = RadioButtonGroup(labels=["by name", "by category"], active=0,
                                      name="region-group")
        self.events = ColumnDataSource(region_events(None, 0))
        self.range = ColumnDataSource(dict(x0=[], x1=[]))
        self.shade = BoxAnnotation(fill_color="#fdae6b", fill_alpha=0.18, line_color="#e6550d",
                                   line_alpha=0.7, line_dash="dashed", visible=False,
                                   name="region-shade")
        fig.add_layout(self.shade)
        cb = CustomJS(args=dict(ev=events_source, evs=self.events, table=self.table,
                                out=self.out, group=self.group, range=self.range,
                                shade=self.shade, names=names_source, cats=list(CATEGORIES)),
                      code=REGION_JS)
        self.group.js_on_change("active", cb)
        self.range.js_on_change("data", cb)
        # the dragged range itself (the boxes touching it may reach beyond it); a selection
        # cleared (reset, a click beside the boxes) clears it
        fig.js_on_event("selectiongeometry", CustomJS(args=dict(range=self.range), code=
                        "const g = cb_obj.geometry; if (g.x0 !== undefined) "
                        "range.data = {x0: [Math.min(g.x0, g.x1)], x1: [Math.max(g.x0, g.x1)]};"))
        events_source.selected.js_on_change("indices", CustomJS(
            args=dict(range=self.range, ev=events_source),
            code="if (!ev.selected.indices.length && range.data.x0.length) "
                 "range.data = {x0: [], x1: []};"))

    def update(self, events: pd.DataFrame, t0: int) -> None:
        """New events: the table's rows, with the selected region cleared."""
        self.events.data = region_events(events, t0)
        self.range.data = dict(x0=[], x1=[])
        self.shade.visible = False

    def set_visible(self, on: bool) -> None:
        """No events (capture=light/off): nothing to select."""
        self.group.visible = self.out.visible = on
        if not on:
            self.table.visible = False
