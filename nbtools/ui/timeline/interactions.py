"""ui: what a person does with the timeline in the page, as BokehJS callbacks (CustomJS), so
it works in a live notebook and in an exported offline HTML alike: names drawn inside the
boxes that fit them, a search field (matches outlined on every rank; count and total time
from the full events table; case, underscores and dashes ignored, the names matched listed;
the region table is in ``region``) and the switch for the flow arrows between ranks' collectives.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from bokeh.models import Checkbox, ColumnDataSource, CustomJS, CustomJSHover, Div, TextInput

from nbtools.schema.tables import CATEGORIES, string_codes

CHAR_PX = 6.2        # an 8pt character, on average (DejaVu/Helvetica in Chromium)
MAX_LABELS = 4000    # beyond this many on screen, names are unreadable anyway


def fit_labels(left, right, y, names, x0: float, x1: float, width_px: float) -> dict:
    """Names that fit inside their boxes in the window [x0, x1] (ms) drawn ``width_px`` wide:
    the whole name where it fits, else its start and "…", nothing under three characters.
    The Python twin of LABELS_JS (the first paint, before any zoom, and tests)."""
    left, right = np.asarray(left, float), np.asarray(right, float)
    out = dict(x=[], y=[], text=[])
    if x1 <= x0 or not len(left):
        return out
    ppx = width_px / (x1 - x0)
    a, b = np.maximum(left, x0), np.minimum(right, x1)
    room = np.floor(((b - a) * ppx - 4) / CHAR_PX)
    names = np.asarray(names, object)
    for i in np.flatnonzero((room >= 3) & (b > a))[:MAX_LABELS].tolist():
        s, n = str(names[i]), int(room[i])
        if not s:
            continue
        out["x"].append(float(a[i]))
        out["y"].append(float(np.asarray(y)[i]))
        out["text"].append(s if len(s) <= n else s[:n - 1] + "…")
    return out


# boxes[j] (left, right, y, and the column texts[j], codes into lookups[j] where given)
# -> labels[j] (x, y, text)
LABELS_JS = """
const x0 = xr.start, x1 = xr.end;
const w = (fig.inner_width && fig.inner_width > 10) ? fig.inner_width : width_px;
if (!(x1 > x0)) return;
const ppx = w / (x1 - x0);
for (let j = 0; j < boxes.length; j++) {
  const d = boxes[j].data, L = d.left, R = d.right, Y = d[ycols[j]], N = d[texts[j]];
  const LU = lookups[j] ? lookups[j].data[Object.keys(lookups[j].data)[0]] : null;
  const X = [], YY = [], T = [];
  if (L !== undefined) for (let i = 0; i < L.length && T.length < max_labels; i++) {
    if (R[i] <= x0 || L[i] >= x1) continue;
    const a = Math.max(L[i], x0), b = Math.min(R[i], x1);
    const n = Math.floor(((b - a) * ppx - 4) / char_px);
    const s = String(LU ? (LU[N[i]] ?? "") : N[i]);
    if (n < 3 || !s || (d.count !== undefined && d.count[i] > 1)) continue;
    X.push(a); YY.push(Y[i]); T.push(s.length <= n ? s : s.slice(0, n - 1) + "\\u2026");
  }
  labels[j].data = {x: X, y: YY, text: T};
}
"""


def link_labels(fig, boxes: list, ycols: list, texts: list, labels: list, width_px: int,
                lookups: list):
    """Refit the names whenever the x range moves or the boxes' data is replaced.
    ``lookups[j]``: a one-column source the codes in ``texts[j]`` index, or None (strings)."""
    cb = CustomJS(args=dict(xr=fig.x_range, fig=fig, boxes=boxes, ycols=ycols, texts=texts,
                            labels=labels, width_px=width_px, char_px=CHAR_PX,
                            max_labels=MAX_LABELS, lookups=lookups), code=LABELS_JS)
    fig.x_range.js_on_change("start", cb)
    fig.x_range.js_on_change("end", cb)
    for b in boxes:
        b.js_on_change("data", cb)
    fig.js_on_change("inner_width", cb)
    return cb


# BokehJS checks for the end of a motion every lod_timeout ms after each paint and repaints
# then; none of those timers is left lod_timeout after its lodend, so the boxes come back
# after that (each leftover timer's repaint was a full one: 100 to 170 ms at 1M events)
LOD_TIMEOUT_MS = 200                  # BokehJS's default: 500
SETTLE_MS = LOD_TIMEOUT_MS + 50

SWAP_JS = """
const show = on => { for (const r of still) r.visible = !on;
                     for (const r of moving) r.visible = on; };
const key = moving[0];
clearTimeout(key.__nbtools_settle);
if (start) show(true);
else key.__nbtools_settle = setTimeout(() => show(false), settle_ms);
"""


def swap_while_moving(figures: list, still: list, moving: list) -> None:
    """While a wheel or drag moves the x range (BokehJS's lodstart to lodend on any of
    ``figures``), draw the ``moving`` renderers instead of the ``still`` ones: their few
    boxes keep every tick to a frame or two. The detail comes back ``SETTLE_MS`` after the
    motion ends, when BokehJS's pending repaint timers have run (before, each was a full
    repaint: four 160 ms paints in a row at 1M events)."""
    for fig in figures:
        fig.lod_timeout = LOD_TIMEOUT_MS
    for event, start in (("lodstart", True), ("lodend", False)):
        cb = CustomJS(args=dict(still=still, moving=moving, start=start,
                                settle_ms=SETTLE_MS), code=SWAP_JS)
        for fig in figures:
            fig.js_on_event(event, cb)


def name_totals(events: pd.DataFrame) -> dict:
    """Per (rank, name): count and total ns over every event (not the drawn boxes), so a
    search's count and total are exact at any zoom."""
    if events is None or not len(events):
        return dict(rank=[], name=[], count=[], total=[])
    codes, names = string_codes(events["name"])
    codes = np.where(codes < 0, len(names), codes)          # no name: "" (the spare slot)
    names = list(names) + [""]
    rank = events["rank"].to_numpy(np.int64)
    key = rank * len(names) + codes
    # the keys are few (ranks x names): count into them directly, no sort of every event
    count = np.bincount(key)
    total = np.bincount(key, weights=events["dur_ns"].to_numpy(np.float64))
    uk = np.flatnonzero(count)
    count, total = count[uk], total[uk]
    return dict(rank=(uk // len(names)).astype(np.int32),
                name=np.asarray(names, object)[uk % len(names)],
                count=count.astype(np.int64), total=total)


FMT_JS = """
function fmt(ns) { const a = Math.abs(ns), g = v => String(parseFloat(v.toPrecision(3)));
  return a < 999.5 ? ns.toFixed(0) + " ns" : a < 999.5e3 ? g(ns / 1e3) + " µs"
       : a < 999.5e6 ? g(ns / 1e6) + " ms"
       : (ns / 1e9).toLocaleString("en-US", {minimumFractionDigits: 2, maximumFractionDigits: 2}) + " s"; }
function esc(s) { return String(s).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;",
  ">": "&gt;", '"': "&quot;"}[c])); }
"""

SEARCH_JS = FMT_JS + """
// case, underscores, dashes and spaces ignored: "allreduce" finds gloo:all_reduce and
// c10d::allreduce_ alike, and the line says which names matched
const norm = s => String(s).toLowerCase().replace(/[_\\s-]/g, "");
const typed = (input.value_input || input.value || "").trim(), q = norm(typed);
const d = ev.data, H = {left: [], right: [], y: []};
if (!q) { hl.data = H; out.text = ""; return; }
const A = agg.data, per = {}, matched = {};
let n = 0, t = 0;
for (let i = 0; i < A.name.length; i++) {
  if (!norm(A.name[i]).includes(q)) continue;
  const r = A.rank[i], p = per[r] || (per[r] = [0, 0]);
  p[0] += A.count[i]; p[1] += A.total[i]; n += A.count[i]; t += A.total[i];
  matched[A.name[i]] = (matched[A.name[i]] || 0) + A.count[i];
}
const hit = names.data.name.map(n => norm(n).includes(q));
for (let i = 0; i < d.left.length; i++)
  if (hit[d.name_i[i]]) {
    H.left.push(d.left[i]); H.right.push(d.right[i]); H.y.push(d.y[i]); }
hl.data = H;
const ranks = Object.keys(per).sort((a, b) => a - b);
const which = Object.keys(matched).sort((a, b) => matched[b] - matched[a]);
const low = typed.toLowerCase(), loose = which.filter(m => !m.toLowerCase().includes(low));
out.text = `<b>${n}</b> events match "${esc(typed)}" · total <b>${fmt(t)}</b>` +
  (ranks.length ? " · " + ranks.map(r => `rank ${r}: ${per[r][0]} / ${fmt(per[r][1])}`).join(" · ")
                : "") + ` <span style="color:#888">(${H.left.length} boxes outlined)</span>` +
  (which.length > 1 ? `<br>${which.length} names: ` + which.slice(0, 6).map(m =>
      `${esc(m)} (${matched[m]})`).join(", ") + (which.length > 6 ? ", …" : "") : "") +
  (loose.length ? ` <span style="color:#888">· ${loose.length} of them spelled otherwise ` +
      `(case, _, - and spaces are ignored)</span>` : "");
"""


def only_if_none(*pairs) -> CustomJS:
    """A HoverTool filter: show this tooltip only while none of ``pairs`` (source,
    renderer, ...) has a visible glyph under the cursor (its tool must come first), so
    one tooltip draws at a time (a flow over a box, a compile marker over its step)."""
    sources, renderers = list(pairs[0::2]), list(pairs[1::2])
    return CustomJS(args=dict(sources=sources, renderers=renderers), code="""
for (let k = 0; k < sources.length; k++)
  if (renderers[k].visible && sources[k].inspected.indices.length) return false;
return true;""")


def merged_hover(source) -> CustomJSHover:
    """A merged box's line in the tooltip, written in the page from its count and busy time
    (a string per box made the exported file megabytes larger)."""
    return CustomJSHover(args=dict(src=source), code=FMT_JS + """
const c = src.data.count[special_vars.index];
return c > 1 ? `${c} events merged (each under a pixel): ${fmt(value)} busy; named after the ` +
               "longest" : "";""")


def start_hover(source, steps) -> CustomJSHover:
    """A box's start: ms on the axis and the time into its step (``steps``: data.step_table),
    as "1,234.567 ms · step 3 + 12.5 µs"."""
    return CustomJSHover(args=dict(src=source, steps=steps), code=FMT_JS + """
const i = special_vars.index, d = src.data, S = steps.data;
const at = d.left[i].toLocaleString("en-US", {minimumFractionDigits: 3, maximumFractionDigits: 3});
for (let k = 0; k < S.rank.length; k++)
  if (S.rank[k] == d.rank[i] && S.step[k] == d.step[i])
    return `${at} ms · step ${d.step[i]} + ${fmt(Math.round((d.left[i] - S.start[k]) * 1e6))}`;
return `${at} ms`;""")


def duration_hover(source) -> CustomJSHover:
    """A box's length, from its left and right (ms), in ns/µs/ms/s as data.fmt_ns says it."""
    return CustomJSHover(args=dict(src=source), code=FMT_JS + """
const i = special_vars.index, d = src.data;
return fmt(Math.round((d.right[i] - d.left[i]) * 1e6));""")


def name_hover(table, column: str = "name") -> CustomJSHover:
    """A box's name (or detail) from its code into ``table``'s ``column``."""
    return CustomJSHover(args=dict(table=table, column=column),
                         code="return String(table.data[column][value] ?? '');")


def lane_hover(source, rows) -> CustomJSHover:
    """'compute on r0 GPU 0 stream 7': the box's category and its lane's row label."""
    return CustomJSHover(args=dict(src=source, rows=rows, cats=list(CATEGORIES)), code="""
const i = special_vars.index;
return `${cats[value] ?? "other"} on ${rows.data.row[src.data.lane_i[i]]}`;""")


class Controls:
    """The search field and the flow switch of one timeline figure."""

    def __init__(self, fig, events_source, flow_renderers, names_source):
        self.agg_source = ColumnDataSource(name_totals(None))
        self.hl_source = ColumnDataSource(dict(left=[], right=[], y=[]))
        self.hits = fig.hbar(y="y", left="left", right="right", height=0.9, fill_color=None,
                             line_color="#ff00aa", line_width=2, source=self.hl_source,
                             name="search-hits")
        self.search = TextInput(placeholder="search event names (e.g. nccl, aten::mm)",
                                width=320, name="timeline-search")
        self.search_out = Div(text="", name="search-result")
        cb = CustomJS(args=dict(input=self.search, ev=events_source, agg=self.agg_source,
                                hl=self.hl_source, out=self.search_out, names=names_source),
                      code=SEARCH_JS)
        self.search.js_on_change("value_input", cb)
        self.search.js_on_change("value", cb)
        events_source.js_on_change("data", cb)      # a refined level of detail: outline again

        self.flows = Checkbox(label="flows between ranks' collectives", active=True,
                              name="flows-switch")
        for r in flow_renderers:
            self.flows.js_link("active", r, "visible")

    def update(self, events: pd.DataFrame) -> None:
        """New events: recompute the per-name totals and clear the highlight."""
        self.agg_source.data = name_totals(events)
        self.hl_source.data = dict(left=[], right=[], y=[])

    def set_visible(self, on: bool) -> None:
        """No events (capture=light/off): nothing to search, select or join."""
        for w in (self.search, self.search_out, self.flows):
            w.visible = on
