"""What a Run's timeline draws, as plain columns: the level of detail and the data each of
the figure's ColumnDataSources gets. numpy and pandas only (no Bokeh), so it can be tested
and benchmarked without building a figure.

Event count must not limit the figure, so events go through ``lod`` first: per lane,
events narrower than a pixel are merged into one box per pixel column.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from nbtools.schema.tables import CATEGORIES, STEP_PATTERNS, string_codes
from nbtools.common.units import fmt_number
from nbtools.trace.details import attach, collective_detail

COMPILE_STYLE = {               # kind -> (marker, colour)
    "compile": ("square", "#1f77b4"),
    "recompile": ("triangle", "#d62728"),
    "backward_compile": ("square", "#8c564b"),   # not cpu_op's cyan
    "graph_break": ("x", "#ff7f0e"),
    "cudagraph_skip": ("diamond", "#9467bd"),
    "cudagraph_record": ("circle", "#2ca02c"),
    "limit_hit": ("star", "#000000"),
}
SUMMARY_STACK = (("compute_ms", "compute", "#1f77b4"),
                 ("exposed_comm_ms", "exposed communication", "#d62728"),
                 ("idle_ms", "idle", "#e0e0e0"),
                 # the rest of the step window: outside the busy span (host time before the
                 # first kernel, copies alone), so each bar totals the step it names
                 ("other_ms", "rest of the step", "#f7f7f7"))
# The bar's whole is the profiled steps' mean window, not step_ms (the measured steps'
# median, in the table beside): "step 20.6 ms" there read as contradicting step_ms 10.6.
SUMMARY_TEXT = (("profiled_window_ms", "profiled step {} ms (mean)"),
                ("gpu_busy_pct", "busy {}%"), ("comm_ms", "comm {} ms"),
                ("exposed_comm_ms", "exposed {} ms"), ("idle_ms", "idle {} ms"))


def lod(events: pd.DataFrame, width_px: int, t0: int, t1: int) -> pd.DataFrame:
    """Level of detail for the window [t0, t1) (ns) drawn ``width_px`` wide.

    Per (rank, lane), events narrower than one pixel that start in the same pixel column
    (and are not split by a wider event) become one box: it spans the merged events,
    takes the category with most summed time, names its longest event, and counts them.
    Wider events pass through unchanged, so with nothing sub-pixel the output is the input.
    Events carrying a ``depth`` (``stack_depth``) merge only with events of their own
    depth, so a parent range and its sub-pixel children stay on their own rows.
    Returns rank, lane, depth, category, name, ts_ns, dur_ns (the span), busy_ns (summed
    durations), count, step, graph (true when most of the busy time was graph-replayed).
    """
    ts, dur = events["ts_ns"].to_numpy(np.int64), events["dur_ns"].to_numpy(np.int64)
    keep = np.flatnonzero((ts < t1) & (ts + dur >= t0))
    px = max((t1 - t0) / max(int(width_px), 1), 1.0)
    lanes, lane_cats = string_codes(events["lane"])
    cats, cat_cats = string_codes(events["category"])
    names, name_cats = string_codes(events["name"])
    depth = (events["depth"].to_numpy(np.int64) if "depth" in events.columns
             else np.zeros(len(events), np.int64))
    key = (events["rank"].to_numpy(np.int64) * (len(lane_cats) + 1) + lanes) \
        * (int(depth.max(initial=0)) + 1) + depth
    idx = keep[np.lexsort((ts[keep], key[keep]))]          # by row, then start
    ts, dur, key = ts[idx], dur[idx], key[idx]

    small = dur < px
    column_px = np.floor((ts - t0) / px)
    new = np.ones(len(idx), bool)
    new[1:] = ((key[1:] != key[:-1]) | ~small[1:] | ~small[:-1]
               | (column_px[1:] != column_px[:-1]))
    starts = np.flatnonzero(new)
    ends = np.r_[starts[1:], len(idx)][:len(starts)]
    group = np.cumsum(new) - 1
    busy = np.add.reduceat(dur, starts)
    # Dominant category by summed time; +1 so zero-length events still vote.
    ncat = max(len(cat_cats), 1)
    votes = np.bincount(group * ncat + cats[idx], weights=dur + 1, minlength=len(starts) * ncat)
    longest = idx[np.lexsort((dur, group))[ends - 1]]     # the last of a group is its longest
    replayed = events["graph"].to_numpy(bool)
    graph_ns = np.add.reduceat(dur * replayed[idx], starts)
    return pd.DataFrame({
        "rank": events["rank"].to_numpy(np.int32)[idx[starts]],
        "lane": pd.Categorical.from_codes(lanes[idx[starts]], categories=pd.Index(lane_cats)),
        "depth": depth[idx[starts]].astype(np.int32),
        "category": pd.Categorical.from_codes(votes.reshape(len(starts), ncat).argmax(axis=1),
                                              categories=pd.Index(cat_cats)),
        "name": pd.Categorical.from_codes(names[longest], categories=pd.Index(name_cats)),
        "ts_ns": ts[starts], "dur_ns": np.maximum.reduceat(ts + dur, starts) - ts[starts],
        "busy_ns": busy, "count": (ends - starts).astype(np.int64),
        "step": events["step"].to_numpy(np.int32)[longest],
        "graph": np.where(busy > 0, 2 * graph_ns >= busy, replayed[longest])})


def spans(left, right, y, gap: float) -> dict:
    """Boxes of one row that overlap or lie under ``gap`` apart, as one span (left, right,
    y): the graph-replay hatch drawn over the union of its boxes looks the same, and a
    hatched span costs BokehJS a pattern fill per box on every paint."""
    left, right, y = (np.asarray(v, np.float64) for v in (left, right, y))
    if not len(left):
        return dict(left=left, right=right, y=y)
    o = np.lexsort((left, y))
    left, right, y = left[o], right[o], y[o]
    row = np.r_[0, np.cumsum(y[1:] != y[:-1])]
    # one running maximum over all rows, each row lifted above the last
    x0 = left.min()
    lift = row * (right.max() - x0 + abs(gap) + 1.0)
    reach = np.maximum.accumulate(right - x0 + lift) - lift + x0
    new = np.r_[True, (row[1:] != row[:-1]) | (left[1:] > reach[:-1] + gap)]
    starts = np.flatnonzero(new)
    # the exact ends (the lifted sums above round in the last bits)
    return dict(left=left[starts], right=np.maximum.reduceat(right, starts), y=y[starts])


def moving_data(d: dict, max_boxes: int) -> dict:
    """What the timeline draws while the wheel turns or a drag pans: the drawn boxes (an
    ``events_data`` dict) binned per row into at most ``max_boxes`` blocks of equal width,
    each coloured by its category with most busy time and as opaque as the block is full.
    BokehJS paints every box of a renderer on every tick (past ``lod_threshold`` a grey
    tenth of them, still mapping all); the full boxes come back when the motion stops."""
    left, right = np.asarray(d["left"], np.float64), np.asarray(d["right"], np.float64)
    if not len(left):
        return dict(left=left, right=right, y=np.zeros(0, np.int32),
                    cat_i=np.zeros(0, np.int8), alpha=np.zeros(0, np.float32))
    y, count = np.asarray(d["y"], np.int64), np.asarray(d["count"])
    busy = np.where(count > 1, np.asarray(d["busy_ns"], np.float64) / 1e6, right - left)
    rows, row = np.unique(y, return_inverse=True)
    x0, x1 = left.min(), right.max()
    per_row = max(int(max_boxes) // len(rows), 1)
    block = np.minimum(((left - x0) / max(x1 - x0, 1e-12) * per_row).astype(np.int64),
                       per_row - 1)
    key = row * per_row + block
    o = np.lexsort((left, key))
    starts = np.flatnonzero(np.r_[True, key[o][1:] != key[o][:-1]])
    group = np.cumsum(np.r_[True, key[o][1:] != key[o][:-1]]) - 1
    lo = np.minimum.reduceat(left[o], starts)
    hi = np.maximum.reduceat(right[o], starts)
    total = np.add.reduceat(busy[o], starts)
    cat = np.asarray(d["cat_i"], np.int64)[o] + 1         # -1 (unknown) votes as 0
    ncat = int(cat.max()) + 1
    votes = np.bincount(group * ncat + cat, weights=busy[o] + 1e-9,
                        minlength=len(starts) * ncat).reshape(len(starts), ncat)
    alpha = np.asarray(d["alpha"], np.float32)[o]
    full = np.clip(total / np.maximum(hi - lo, 1e-12), 0.35, 1.0)
    return dict(left=lo, right=hi, y=y[o][starts].astype(np.int32),
                cat_i=(votes.argmax(axis=1) - 1).astype(np.int8),
                # a block of single events as opaque as they are; annotations stay faint
                alpha=np.minimum(full, np.maximum.reduceat(alpha, starts)).astype(np.float32))


def stack_depth(events: pd.DataFrame) -> np.ndarray:
    """Each event's sub-row in its (rank, lane), as Perfetto stacks slices: 0 for an
    outermost range, one deeper for each range it sits in. Ranges that overlap without
    nesting (several CPU threads drawn as one lane) go to the lowest free sub-row, so no
    two events of one sub-row overlap and the cursor is over one box at a time."""
    n = len(events)
    out = np.zeros(n, np.int32)
    if n < 2:
        return out
    lanes, lane_cats = string_codes(events["lane"])
    key = events["rank"].to_numpy(np.int64) * (len(lane_cats) + 1) + lanes
    ts = events["ts_ns"].to_numpy(np.int64)
    end = ts + events["dur_ns"].to_numpy(np.int64)
    order = np.lexsort((ts - end, ts, key))       # by lane, start, the longer (parent) first
    k, s, e = key[order], ts[order], end[order]
    bounds = np.flatnonzero(np.r_[True, k[1:] != k[:-1], True])
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        ss, ee = s[a:b], e[a:b]
        if b - a < 2 or (ss[1:] >= np.maximum.accumulate(ee)[:-1]).all():
            continue                              # nothing overlaps: one row
        # ranges still open at each start; that is the nesting depth when ranges nest
        d = (np.arange(b - a) - np.searchsorted(np.sort(ee), ss, side="right")).astype(np.int32)
        out[order[a:b]] = d if _no_overlap(ss, ee, d) else _lowest_free(ss, ee)
    return out


def _no_overlap(ss, ee, d) -> bool:
    o = np.lexsort((ss, d))
    same = d[o][1:] == d[o][:-1]
    return bool((d >= 0).all() and (ss[o][1:][same] >= ee[o][:-1][same]).all())


def _lowest_free(ss, ee) -> np.ndarray:
    ends, out = [], np.empty(len(ss), np.int32)
    for i, (s, e) in enumerate(zip(ss.tolist(), ee.tolist())):
        for level, last in enumerate(ends):
            if last <= s:
                ends[level], out[i] = e, level
                break
        else:
            out[i] = len(ends)
            ends.append(e)
    return out


def fmt_ns(ns) -> list:
    """Durations for people: ns, µs, ms or s, three significant figures."""
    out = []
    for v in np.asarray(ns, np.float64).tolist():
        a = abs(v)
        # the unit is picked after rounding: 999.96 µs is "1 ms", not "1e+03 µs"
        out.append("" if v != v else f"{v:.0f} ns" if a < 999.5 else f"{v / 1e3:.3g} µs"
                   if a < 999.5e3 else f"{v / 1e6:.3g} ms" if a < 999.5e6
                   else f"{v / 1e9:,.2f} s")
    return out


def lane_sort_key(lane: str):
    """Sort key for lanes: CUDA streams first, then CPU threads, by their numbers."""
    kind, _, rest = lane.partition(":")
    nums = [int(p) if p.lstrip("-").isdigit() else 0 for p in rest.split(":") if p]
    return (0 if kind == "cuda" else 1, nums, lane)


def origin_ns(run) -> int:
    """The x axis origin: the run's earliest timeline event (else step, else compile)."""
    for df in (run.events, run.steps, run.compile_events):
        if len(df):
            return int(df["ts_ns"].min())
    return 0


def origin_words(run) -> str:
    """What x = 0 is on a timeline drawn from origin_ns, for its axes."""
    return ("ms since the first profiled event" if len(run.events)
            else "ms since the run's first step")


def first_profiled_ns(run) -> int:
    """When the first profiled step started (ns); the timeline's origin where none was profiled."""
    prof = run.steps[run.steps["phase"] == "profiled"] if len(run.steps) else run.steps
    return int(prof["ts_ns"].min()) if len(prof) else origin_ns(run)


def initial_window(run, t0, mode="events"):
    """The timeline's initial x window (ns): the profiled events, where there are any (they
    are all it draws: with mode "all" the whole run is on the compile strip's axis in
    seconds, not stretched over this one: 116 s of compile left the events in its last
    pixels); without events the steps and compiles."""
    if mode not in ("events", "all"):
        raise ValueError(f"window={mode!r}: 'events' (the profiled steps) or 'all' (the whole "
                         "run, on the compile strip first)")
    frames = [run.events] if len(run.events) else \
        [df for df in (run.steps, run.compile_events) if len(df)]
    if not frames:
        return t0, t0 + 1_000_000
    lo = min(int(df["ts_ns"].min()) for df in frames)
    hi = max(int((df["ts_ns"] + df["dur_ns"]).max()) for df in frames)
    pad = max((hi - lo) // 100, 1)
    return lo - pad, hi + pad


EVENT_FIELDS = ("left", "right", "y", "rank", "cat_i", "name_i", "lane_i", "step", "count",
                "busy_ns", "alpha", "graph", "detail_i")


def events_data(boxes: pd.DataFrame | None, lane_y: dict, rows: list, t0: int,
                details=None) -> dict:
    """The boxes' source. ``lane_y`` maps (rank, lane) to the lane's first row; a box sits
    ``depth`` rows below it. Names, categories and lanes go as codes (``name_i`` into the
    boxes' name categories, ``cat_i`` into CATEGORIES, ``lane_i`` into ``rows``); the
    hover's start (ms since ``t0``, time into the step) and duration are written in the
    page from left/right and step_table: a string per box was most of an exported
    timeline's bytes (``decode`` gives the strings back)."""
    if boxes is None or not len(boxes):
        return dict({k: [] for k in EVENT_FIELDS}, details=[""])
    rank = boxes["rank"].to_numpy(np.int64)
    codes, cats = string_codes(boxes["lane"])
    # (rank, lane) -> row through a lookup table over the few distinct lanes
    ranks = np.unique(rank)
    table = np.array([[lane_y.get((int(r), str(c)), -1) for c in cats] for r in ranks], np.int32)
    base = table[np.searchsorted(ranks, rank), codes]
    depth = boxes["depth"].to_numpy(np.int32) if "depth" in boxes.columns else 0
    y = base + depth
    ts = boxes["ts_ns"].to_numpy(np.int64)
    dur = boxes["dur_ns"].to_numpy(np.int64)
    busy = boxes["busy_ns"].to_numpy(np.int64)
    count = boxes["count"].to_numpy(np.int64)
    step = boxes["step"].to_numpy(np.int32)
    cat = boxes["category"].astype(str).to_numpy(object)
    ccodes, ccats = string_codes(boxes["category"])
    known = np.array([CATEGORIES.index(c) if c in CATEGORIES else -1 for c in ccats] + [-1])
    name_i, _ = string_codes(boxes["name"])    # a merged box: its longest event's
    merged = count > 1
    # A merged box is drawn as wide as its span; its opacity says how full that span was.
    alpha = np.where(merged, np.clip(busy / np.maximum(dur, 1), 0.35, 1.0), 1.0)
    alpha = np.where(cat == "annotation", 0.3, alpha).astype(np.float32)
    return dict(left=(ts - t0) / 1e6, right=(ts + dur - t0) / 1e6, y=y, rank=rank.astype(np.int32),
                cat_i=known[ccodes].astype(np.int8), name_i=name_i.astype(np.int32),
                lane_i=base.astype(np.int32), step=step,
                # a merged box's summed time; a single event's is its length (right - left),
                # so 0 there (a column of zeros packs to nothing on the wire)
                busy_ns=np.where(merged, busy, 0).astype(np.float32),
                count=count.astype(np.int32), alpha=alpha, graph=boxes["graph"].to_numpy(bool),
                **detail_codes(box_details(boxes, details, cat == "communication")))


def box_details(boxes: pd.DataFrame, details, comm: np.ndarray) -> np.ndarray:
    """Each box's tooltip detail; a single collective's says what its trace did not record
    (group, ranks, bytes) rather than leaving the field out."""
    text = attach(boxes, details)
    pick = np.flatnonzero(comm & (boxes["count"].to_numpy() == 1))
    said: dict = {}
    for i in pick.tolist():
        t = text[i]
        text[i] = said.get(t) or said.setdefault(t, collective_detail(t))
    return text


def detail_codes(text: np.ndarray) -> dict:
    """Tooltip details as codes into their distinct texts (most boxes share a few shapes, or
    have none): ``detail_i`` per box, ``details`` (its own source in the page; 0 is "")."""
    s = pd.Series(text, dtype=object)
    cats = [""] + [t for t in pd.unique(s[s != ""])]
    return dict(detail_i=pd.Categorical(s, categories=cats).codes.astype(np.int32),
                details=cats)


def decode(data: dict, names, rows, details=("",)) -> dict:
    """The boxes' name, category, lane label and detail as strings (what the page shows)."""
    names, rows = np.asarray(list(names) + [""], object), np.asarray(list(rows) + [""], object)
    cats = np.asarray(list(CATEGORIES) + [""], object)
    details = np.asarray(list(details), object)
    return dict(detail=details[np.asarray(data["detail_i"], np.int64)],
                name=names[np.asarray(data["name_i"], np.int64)],
                category=cats[np.asarray(data["cat_i"], np.int64)],
                lane=rows[np.asarray(data["lane_i"], np.int64)])


def step_table(step_ts: dict, t0: int) -> dict:
    """Every (rank, step)'s start in ms since ``t0``, for the hover's time into the step."""
    keys = sorted(step_ts)
    return dict(rank=np.array([r for r, _ in keys], np.int32),
                step=np.array([s for _, s in keys], np.int32),
                start=np.array([(step_ts[k] - t0) / 1e6 for k in keys], np.float64))


def step_starts(steps: pd.DataFrame) -> dict:
    """(rank, step) -> the step's start (ns), for times relative to the step."""
    if not len(steps):
        return {}
    return dict(zip(zip(steps["rank"].astype(int).tolist(), steps["step"].astype(int).tolist()),
                    steps["ts_ns"].astype(np.int64).tolist()))


def steps_data(steps, ranks=(), first=None, rows=(), t0=0, lo=0, hi=0, events=None) -> dict:
    """The profiled steps' bands behind each rank's rows (``first``: rank -> its first row).
    A band is labelled "step N" only on a rank whose ``events`` hold no step range: there
    the range's own name ("nbtools/step 13", "ProfilerStep#2") says it, and the band's grey
    label was printed over it."""
    prof = steps[steps["phase"] == "profiled"]
    if not len(prof) and len(steps):   # e.g. traces without phases: steps inside the window
        prof = steps[(steps["ts_ns"] < hi) & (steps["ts_ns"] + steps["dur_ns"] > lo)]
    if not len(prof):
        return dict(left=[], right=[], bottom=[], top=[], shade=[], label=[], label_y=[])
    rank = prof["rank"].to_numpy(np.int64)
    # Each rank's band covers its own rows: from its first row to the next rank's.
    nxt = {r: (first[ranks[i + 1]] if i + 1 < len(ranks) else len(rows))
           for i, r in enumerate(ranks)}
    top = np.array([first[r] for r in rank.tolist()], float) - 0.5
    bottom = np.array([nxt[r] for r in rank.tolist()], float) - 0.5
    ts = prof["ts_ns"].to_numpy(np.int64)
    step = prof["step"].to_numpy(np.int32)
    label = np.char.add("step ", step.astype(str)).astype(object)
    label[np.isin(rank, _ranged(events))] = ""
    return dict(left=(ts - t0) / 1e6, right=(ts + prof["dur_ns"].to_numpy(np.int64) - t0) / 1e6,
                bottom=bottom, top=top,
                shade=np.where(step % 2 == 0, "#f2f2f2", "#e6eef7").astype(object),
                label=label, label_y=top + 0.05)


def _ranged(events) -> list:
    """The ranks whose events hold a step range (tables.STEP_PATTERNS)."""
    if events is None or not len(events):
        return []
    hit = [n for n in pd.unique(events["name"]) if any(p.match(str(n)) for p in STEP_PATTERNS)]
    return events.loc[events["name"].isin(hit), "rank"].unique().tolist() if hit else []


def summary_data(summary: pd.DataFrame, ranks: list) -> dict:
    """Read (never compute) the per-rank numbers; missing columns draw as 0 and are left out
    of the text (a CPU rank has no GPU busy: "busy n/a" on every CPU run said nothing)."""
    out = dict(y=np.arange(len(ranks), dtype=np.int32), text=[])
    by_rank = summary.drop_duplicates("rank").set_index("rank") if "rank" in summary.columns \
        else summary
    for f in [f for f, _, _ in SUMMARY_STACK[:-1]] + ["profiled_window_ms"]:
        col = by_rank[f] if f in by_rank.columns else None
        out[f] = np.array([float(col.get(r, np.nan)) if col is not None else np.nan
                           for r in ranks], float)
        out[f] = np.nan_to_num(out[f], nan=0.0)
    parts = sum(out[f] for f, _, _ in SUMMARY_STACK[:-1])
    out["other_ms"] = np.clip(out.pop("profiled_window_ms") - parts, 0.0, None)
    out["text_x"] = sum(out[f] for f, _, _ in SUMMARY_STACK)
    for r in ranks:
        parts = []
        for f, fmt in SUMMARY_TEXT:
            v = by_rank[f].get(r, np.nan) if f in by_rank.columns else np.nan
            if pd.notna(v):
                parts.append(fmt.format(fmt_number(v)))
        out["text"].append(" · ".join(parts))
    return out
