"""Timeline figures and level of detail, on synthetic runs (support/runs.py: no GPU, no
browser)."""
from __future__ import annotations

import re
import time

import numpy as np
import pandas as pd
import pytest

from nbtools.schema import tables
from nbtools.config.step_config import StepConfig
from nbtools.results.run import Run
from support.runs import million_run, synthetic_run


def _events(rows):
    """Tiny event table from (rank, lane, category, ts, dur[, graph]) tuples."""
    rows = [r + (False,) * (6 - len(r)) for r in rows]
    return tables.from_columns(dict(
        rank=[r[0] for r in rows], lane=[r[1] for r in rows], category=[r[2] for r in rows],
        name=[f"k{i}" for i in range(len(rows))], ts_ns=[r[3] for r in rows],
        dur_ns=[r[4] for r in rows], step=[0] * len(rows), correlation=list(range(len(rows))),
        graph=[r[5] for r in rows]), tables.EVENT_COLUMNS)


# -- lod ---------------------------------------------------------------------------------
def test_lod_is_exact_when_nothing_is_sub_pixel():
    from nbtools.ui.timeline import lod
    run = synthetic_run(events_per_rank=500)
    ev = run.events
    t0, t1 = int(ev.ts_ns.min()), int((ev.ts_ns + ev.dur_ns).max())
    px_budget = int((t1 - t0) / ev.dur_ns.min()) + 10       # every event >= 1 px
    out = lod(ev, px_budget, t0, t1)
    assert len(out) == len(ev) and (out["count"] == 1).all()
    key = ["rank", "ts_ns", "dur_ns"]
    a = out[key].sort_values(key).to_numpy()
    b = ev[key].sort_values(key).to_numpy()
    np.testing.assert_array_equal(a, b)
    assert (out["busy_ns"] == out["dur_ns"]).all()


def test_lod_merges_sub_pixel_events_and_keeps_busy_time():
    from nbtools.ui.timeline import lod
    run = synthetic_run(events_per_rank=20_000)
    ev = run.events
    t0, t1 = int(ev.ts_ns.min()), int((ev.ts_ns + ev.dur_ns).max())
    width = 800
    out = lod(ev, width, t0, t1)
    px = (t1 - t0) / width
    assert len(out) < len(ev) / 4
    assert out["count"].sum() == len(ev)
    assert out["busy_ns"].sum() == ev["dur_ns"].sum()            # summed time is exact
    for (rank, lane), grp in out.groupby(["rank", "lane"], observed=True):
        if not str(lane).startswith("cuda"):
            continue
        orig = ev[(ev["rank"] == rank) & (ev["lane"] == lane)]
        busy = orig["dur_ns"].sum()
        drawn = grp["dur_ns"].sum()           # merged boxes are drawn across their span
        assert busy <= drawn <= busy + len(grp) * 2 * px
        # a merged box never spans more than its pixel column plus one sub-pixel event
        assert grp.loc[grp["count"] > 1, "dur_ns"].max() < 2 * px
    assert set(out["rank"]) == {0, 1}


def test_lod_keeps_the_dominant_category_and_graph_share():
    from nbtools.ui.timeline import lod
    ev = _events([(0, "cuda:0:7", "compute", 0, 10, True), (0, "cuda:0:7", "compute", 12, 10, True),
                  (0, "cuda:0:7", "communication", 25, 30), (0, "cuda:0:7", "compute", 5000, 4000)])
    out = lod(ev, 10, 0, 10_000).sort_values("ts_ns")       # 1 px = 1000 ns
    assert list(out["count"]) == [3, 1]
    first = out.iloc[0]
    assert first["category"] == "communication" and first["busy_ns"] == 50
    assert first["ts_ns"] == 0 and first["dur_ns"] == 55 and not first["graph"]
    assert out.iloc[1]["category"] == "compute" and out.iloc[1]["dur_ns"] == 4000


def test_lod_window_and_empty():
    from nbtools.ui.timeline import lod
    ev = _events([(0, "cuda:0:7", "compute", 0, 10), (0, "cuda:0:7", "compute", 5000, 10)])
    assert len(lod(ev, 100, 1000, 2000)) == 0
    assert list(lod(ev, 100, 4000, 6000)["ts_ns"]) == [5000]


def test_lod_on_a_million_events_takes_seconds():
    from nbtools.ui.timeline import lod
    ev = million_run().events
    t0, t1 = int(ev.ts_ns.min()), int((ev.ts_ns + ev.dur_ns).max())
    # this process's CPU seconds, not the wall clock: a busy host stretches the wall, not
    # the work (a per-event Python loop would take minutes of CPU)
    start = time.process_time()
    out = lod(ev, 1100, t0, t1)
    assert time.process_time() - start < 5.0
    assert len(ev) >= 1_000_000 and out["count"].sum() == len(ev) and len(out) < 60_000


# -- Timeline ----------------------------------------------------------------------------
def test_sources_hold_both_ranks_and_lanes_per_thread_are_labelled():
    from nbtools.ui.timeline import Timeline
    run = synthetic_run()
    tl = Timeline(run)
    data = tl.events_source.data
    assert {s.split(" ")[0] for s in tl.decode()["lane"]} == {"r0", "r1"}
    labels = list(tl.figure.yaxis.major_label_overrides.values())
    # one row per CPU thread and GPU stream; a thread's nested ranges on labelled depth rows
    assert labels == ["r0 GPU 0 stream 7", "r0 GPU 0 stream 13", "r0 CPU thread 1001",
                      "· depth 1", "r0 CPU thread 1002",
                      "r1 GPU 0 stream 7", "r1 GPU 0 stream 13", "r1 CPU thread 1001",
                      "· depth 1", "r1 CPU thread 1002"]
    assert len(labels) == len(tl._rows)                        # every row has its label
    assert sorted(set(tl.compile_source.data["rank"])) == [0, 1]
    assert 0 < sum(data["graph"]) < len(data["graph"])   # graph replays and others
    # drawn hatched by one overlay: touching replays of a row as one span, which holds
    # every replayed box and no box that was not replayed
    hatched = tl.graph_source.data
    assert 0 < len(hatched["left"]) < sum(data["graph"])
    span_of = {}
    for a, b, y in zip(hatched["left"], hatched["right"], hatched["y"]):
        span_of.setdefault(y, []).append((a, b))
    for x0, x1, y, g in zip(data["left"], data["right"], data["y"], data["graph"]):
        inside = any(a <= x0 and x1 <= b for a, b in span_of.get(y, []))
        assert inside if g else not any(a < x0 < b or a < x1 < b
                                        for a, b in span_of.get(y, [])), (x0, y, g)
    assert tl.stats["events"] == len(run.events)
    # x axis: ms from the earliest event; the hover says ms and the time into the step,
    # never epoch nanoseconds
    assert tl.origin == int(run.events.ts_ns.min())
    assert min(data["left"]) == pytest.approx(0.0)
    # the time into the step is written in the page (test_browser.py reads the tooltip)
    # from each (rank, step)'s start: every box's step has one
    st = tl.step_start_source.data
    starts = {(int(r), int(s)): x for r, s, x in zip(st["rank"], st["step"], st["start"])}
    keyed = [(int(r), int(s)) in starts for r, s in zip(data["rank"], data["step"])]
    assert sum(keyed) > 0.9 * len(keyed)
    first = run.steps.sort_values("ts_ns").iloc[0]
    assert starts[(int(first["rank"]), int(first["step"]))] == pytest.approx(
        (int(first["ts_ns"]) - tl.origin) / 1e6)
    assert "when" not in data and "dur" not in data      # no string per box for them
    tips = " ".join(str(t) for h in tl.figure.tools if hasattr(h, "tooltips") and h.tooltips
                    for t in h.tooltips)
    assert "{ns}" not in tips and "@left{custom}" in tips and "@right{custom}" in tips
    one = Timeline(run, collapse_cpu=True)
    assert "r0 CPU (all threads)" in one.figure.yaxis.major_label_overrides.values()


def _overlaps(data) -> int:
    """Pairs of boxes in one row that overlap in time (what stacks tooltips)."""
    d = pd.DataFrame({k: data[k] for k in ("y", "left", "right")}).sort_values(["y", "left"])
    same = d["y"].to_numpy()[1:] == d["y"].to_numpy()[:-1]
    return int((same & (d["left"].to_numpy()[1:] < d["right"].to_numpy()[:-1] - 1e-9)).sum())


def test_nested_ranges_stack_by_depth_and_no_row_overlaps():
    from nbtools.ui.timeline import Timeline
    from nbtools.ui.timeline.data import stack_depth
    lanes = ["cpu:1"] * 5 + ["cpu:2"] * 2 + ["cuda:0:7"] * 2
    ts = [0, 10, 12, 30, 200, 5, 50, 0, 100]
    dur = [100, 15, 3, 20, 10, 100, 10, 50, 50]
    ev = pd.DataFrame({"rank": 0, "lane": lanes, "ts_ns": ts, "dur_ns": dur})
    # nested: 0 holds 10 (holds 12) and 30; 200 is after it; each lane stacks on its own
    assert stack_depth(ev).tolist() == [0, 1, 2, 1, 0, 0, 1, 0, 0]
    # lanes drawn as one overlap without nesting: packed, no two boxes of a row overlap
    one = ev[ev["ts_ns"] < 150].assign(lane="cpu")
    d = stack_depth(one)
    rows = dict(y=d, left=one["ts_ns"].to_numpy(), right=(one["ts_ns"] + one["dur_ns"]).to_numpy())
    assert _overlaps(rows) == 0 and d.max() >= 3
    # a run: every box in its own place, the lane's sub-rows below its label
    tl = Timeline(synthetic_run(events_per_rank=600))
    data = tl.events_source.data
    assert _overlaps(data) == 0
    assert tl.figure.y_range.start == len(tl._rows) - 0.5 and max(data["y"]) < len(tl._rows)
    assert len(tl._rows) > len(tl._lane_y)                     # sub-rows exist


def test_figures_follow_the_page_width_and_wheel_zoom_waits_to_be_switched_on():
    from bokeh.models import WheelZoomTool
    from nbtools.ui.timeline import Timeline
    run = synthetic_run(events_per_rank=200)
    tl = Timeline(run)
    for fig in (tl.figure, tl.summary_figure):
        assert fig.sizing_mode == "stretch_width"
    assert tl.layout.sizing_mode == "stretch_width"
    wheel = [t for t in tl.figure.tools if isinstance(t, WheelZoomTool)]
    assert wheel and tl.figure.toolbar.active_scroll is None     # page scroll is not zoom
    fixed = Timeline(run, width=700)
    assert fixed.figure.width == 700 and fixed.figure.sizing_mode is None
    # the legend lists what this run has: no CUDA-graph entry without graph replays
    shown = {i.label.value for i in tl.figure.legend[0].items if i.visible}
    assert "compute" in shown and "collective: waited for the last rank" in shown
    run.events = run.events.assign(graph=False)
    tl.update(run)
    shown = {i.label.value for i in tl.figure.legend[0].items if i.visible}
    assert "CUDA-graph replay" not in shown


def test_compile_strip_has_reasons_and_every_kind_on_its_own_axis():
    from nbtools.ui.timeline import Timeline
    run = synthetic_run()
    tl = Timeline(run)
    d = tl.compile_source.data
    kinds = set(d["kind"])
    assert {"compile", "recompile", "graph_break", "cudagraph_skip", "limit_hit"} <= kinds
    i = list(d["kind"]).index("recompile")
    assert "size mismatch" in d["reason"][i] and d["marker"][i] == "triangle"
    assert len(tl.span_source.data["x"]) == 4     # compile + recompile durations, 2 ranks
    strip = tl.strip.figure
    assert strip.title.text.startswith("compile") and strip.name == "compile-strip"
    # its own axis holds every step and every compile: nothing to zoom out for
    lo, hi = strip.x_range.start, strip.x_range.end
    assert lo <= min(d["x"]) and max(d["x"]) <= hi
    assert lo <= min(tl.strip.steps_source.data["left"]) and \
        max(tl.strip.steps_source.data["right"]) <= hi
    assert len(tl.strip.steps_source.data["left"]) == len(run.steps)
    assert "zoom" not in tl.figure.title.text and "zoom" not in strip.title.text
    assert tl.strip.untimed.text == ""
    # a skip counted without a time is listed, never drawn on the axis
    extra = run.compile_events.iloc[[0]].assign(kind="cudagraph_skip", reason="(counted only)")
    run.compile_events = pd.concat([run.compile_events, extra], ignore_index=True)
    tl.update(run)
    assert len(tl.compile_source.data["x"]) == len(run.compile_events) - 1
    assert "rank 0: 1 cudagraph_skip" in tl.strip.untimed.text


def test_update_replaces_data_in_place_and_notifies_the_document():
    from bokeh.document import Document
    from nbtools.ui.timeline import Timeline
    tl = Timeline(synthetic_run(seed=1))
    doc = Document()
    doc.add_root(tl.layout)
    changed = []
    doc.on_change(lambda event: changed.append(event))
    sources = (tl.events_source, tl.compile_source, tl.steps_source, tl.summary_source)
    before = [s.data for s in sources]
    fig = tl.figure
    tl.update(synthetic_run(n_ranks=3, seed=2))
    assert (tl.events_source, tl.compile_source, tl.steps_source, tl.summary_source) == sources
    assert tl.figure is fig and tl.layout.document is doc
    assert all(s.data is not b for s, b in zip(sources, before))
    assert {s.split(" ")[0] for s in tl.decode()["lane"]} == {"r0", "r1", "r2"}
    touched = {(getattr(e, "model", None), getattr(e, "attr", None)) for e in changed}
    assert (tl.events_source, "data") in touched


def test_zoom_refines_through_jupyter_bokeh():
    """A RangesUpdate from the browser, delivered the way BokehModel delivers it."""
    from jupyter_bokeh.widgets import BokehModel
    from nbtools.ui.timeline import Timeline
    tl = Timeline(synthetic_run(events_per_rank=20_000))
    widget = BokehModel(tl.layout)
    sent = []
    widget.send = lambda msg, buffers=None: sent.append(msg)   # no frontend attached
    coarse = tl.events_source.data
    px_coarse = tl.stats["pixel_ns"]
    x0, x1 = 1.0, 1.2                                  # 0.2 ms of a 9 ms window
    # what BokehJS sends after a zoom: a MessageSent bokeh_event with the model as a ref
    values = {"type": "map", "entries": [["model", {"id": tl.figure.id}], ["x0", x0],
                                         ["x1", x1], ["y0", 0.0], ["y1", 1.0]]}
    widget._sync_model(widget, {"event": "jsevent", "kind": "MessageSent",
                                "msg_type": "bokeh_event",
                                "msg_data": {"type": "event", "name": "rangesupdate",
                                             "values": values}}, [])
    fine = tl.events_source.data
    assert fine is not coarse and sent, "refine must replace the data and patch the frontend"
    def in_view(d):
        return (d["right"] >= x0) & (d["left"] <= x1)
    assert in_view(fine).sum() > 3 * in_view(coarse).sum()          # more detail where we look
    assert fine["count"][in_view(fine)].sum() >= coarse["count"][in_view(coarse)].sum() * 0.9
    assert tl.stats["pixel_ns"] < px_coarse / 20
    # only what overlaps the window plus its padding (a ProfilerStep range may start earlier)
    assert min(fine["right"]) >= x0 - 0.1 and max(fine["left"]) <= x1 + 0.1


def test_summary_strip_reads_summary_and_tolerates_missing_columns():
    from nbtools.ui.timeline import Timeline
    run = synthetic_run()
    tl = Timeline(run)
    d = tl.summary_source.data
    assert list(d["compute_ms"]) == [1.8, 1.8] and "busy 71%" in d["text"][0]
    run.summary = pd.DataFrame({"rank": [0, 1], "step_ms": [3.0, 3.1]})
    tl.update(run)
    d = tl.summary_source.data
    # missing numbers draw as 0 and are left out of the text, never "busy n/a"
    assert list(d["compute_ms"]) == [0.0, 0.0] and "busy" not in d["text"][1]
    run.summary = pd.DataFrame()
    tl.update(run)
    assert len(tl.summary_source.data["text"]) == 2


def test_empty_run_builds():
    from nbtools.ui.timeline import Timeline, run_figure
    run = Run(config=None)
    tl = Timeline(run)
    assert len(tl.events_source.data["left"]) == 0
    assert run_figure(run) is not None


def test_compare_aligns_first_profiled_steps_and_shows_deltas():
    from nbtools.ui.timeline import compare_figure
    a = synthetic_run(seed=3)
    b = synthetic_run(seed=4, step_ns=2_000_000, config=StepConfig(scenario="tp-mlp-infer"))
    lay = compare_figure(a, b)
    fig_a, fig_b, *_rest, bar = lay.children
    assert fig_a.x_range is fig_b.x_range
    # a wheel over either figure moves both: both draw their binned boxes while it turns
    moving = {r.id for f in (fig_a, fig_b) for r in f.renderers if r.name == "events-moving"}
    assert len(moving) == 2
    for fig in (fig_a, fig_b):
        assert {cb.args["moving"][0].id for cb in fig.js_event_callbacks["lodstart"]} == moving
    for fig in (fig_a, fig_b):
        src = next(r.data_source for r in fig.renderers if "shade" in r.data_source.data)
        assert min(src.data["left"]) == pytest.approx(0.0)       # first profiled step at 0
    deltas = bar.renderers[0].data_source.data
    assert "compute" in deltas["category"] and "communication" in deltas["category"]
    i = list(deltas["category"]).index("compute")
    assert deltas["delta"][i] == pytest.approx(deltas["b"][i] - deltas["a"][i])
    assert deltas["b"][i] < deltas["a"][i]          # B's steps are shorter


def test_run_plot_and_webgl_option():
    run = synthetic_run(events_per_rank=300)
    fig = run.plot(backend="webgl", width=700)
    main = fig.layout.select_one({"name": "timeline"})
    assert main.output_backend == "webgl" and main.width == 700
    # in Jupyter it is a live widget (zoom refines in Python); exported, static inline HTML
    assert "application/vnd.jupyter.widget-view+json" in fig._repr_mimebundle_()


def test_static_mode_gives_self_contained_html(monkeypatch):
    monkeypatch.setenv("NBTOOLS_STATIC", "1")
    html = synthetic_run(events_per_rank=50).plot()._repr_mimebundle_()["text/html"]
    assert "Bokeh" in html and "<script" in html and "cdn.bokeh.org" not in html
    # BokehJS itself holds the texts "<head>" and "<body>": the cut must not fall inside it
    assert html.count("BEGIN bokeh.min.js") == 1
    outside = re.sub(r"<script[^>]*>.*?</script>", "", html, flags=re.S)
    assert "function _(" not in outside and len(outside) < 5_000, outside[:300]


def test_exported_notebook_carries_bokehjs_once():
    from nbtools.report.notebook import _once
    js = "<script>/* BEGIN bokeh.min.js */" + "x" * 20_000 + "</script>"
    page = f"<html>{js}<div>fig 1</div><script>embed(1)</script>{js}<div>fig 2</div>" \
           "<script>embed(2)</script></html>"
    out = _once(page)
    assert out.count("BEGIN bokeh.min.js") == 1 and "embed(1)" in out and "embed(2)" in out
    assert out.index("BEGIN bokeh") < out.index("fig 1")
