"""Issue 32's timeline details, on synthetic runs (their BokehJS side, on pixels in Chromium:
test_browser_timeline_details.py): window="all" on a run with minutes of compile, a failed
or empty run's plot, the region table's counts and clipped totals, compile tooltips without
blanks, collectives that say what their trace did not record."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from support.runs import long_compile_run, synthetic_run




def test_broken_axis_cuts_a_long_compile_and_keeps_real_seconds():
    from nbtools.ui.timeline.broken_axis import STEP_PX, AXIS_PX, cuts, knots, to_axis
    steps = np.arange(40) * 0.01 + 116.0                   # 40 steps of 8 ms after it
    instants = np.r_[0.0, 0.001, 116.0, steps, steps + 0.008]
    real, axis = knots(instants, np.full(40, 0.008))
    span = axis[-1] - axis[0]
    assert 0.008 / span * AXIS_PX >= STEP_PX                # a step is a few pixels wide
    c = cuts(real, axis)
    assert len(c["left"]) == 1 and c["real_s"][0] == pytest.approx(115.999)
    assert c["text"] == ["116.0 s cut"]
    # outside the cut, time runs at its own pace; the map is increasing
    x = to_axis(steps, real, axis)
    assert np.allclose(np.diff(x), 0.01) and (np.diff(axis) > 0).all()
    # a run whose steps are readable anyway is not cut
    r2, a2 = knots([0.0, 1.0, 2.0], [0.5, 0.5])
    assert np.array_equal(r2, a2)


def test_window_all_puts_the_whole_run_first_on_a_cut_axis_and_keeps_the_events_readable():
    from nbtools.ui.timeline import Timeline
    run = long_compile_run()
    tl = Timeline(run, width=1100, window="all")
    # the timeline draws the profiled events (all it has) on its own ms axis
    lo, hi = tl.window_ms
    assert -1 < lo < 0 and 8 < hi < 10, tl.window_ms       # 3 steps of 3 ms, not -120,000
    assert tl.layout.children[1] is tl.strip.figure         # the whole run first
    strip = tl.strip
    assert list(strip.cut_source.data["text"])[0] == "116.0 s cut"
    s = strip.steps_source.data
    width = strip.figure.x_range.end - strip.figure.x_range.start
    measured = np.asarray(s["phase"]) == "measured"
    px = (np.asarray(s["right"]) - np.asarray(s["left"]))[measured] / width * 1100
    assert px.min() >= 2, px.min()                           # steps readable, not one pixel
    assert "drawn narrow" in strip.figure.xaxis.axis_label
    # the tooltips keep real time: the recompile 116 s in
    m = strip.mark_source.data
    i = list(m["kind"]).index("recompile")
    assert m["at"][i].startswith("116.0"), m["at"][i]
    events = Timeline(run, width=1100)
    assert events.layout.children[1] is not events.strip.figure
    with pytest.raises(ValueError, match="window='everything'"):
        Timeline(run, window="everything")


def test_a_failed_or_empty_run_says_why_in_one_line():
    from nbtools.results.run import Run
    from nbtools.ui.timeline import Timeline
    failed = Run(config=None, status="failed",
                 errors={1: "RunTimeout: rank 1 did not finish step 3 in 600 s\nTraceback ...",
                         0: "peer rank 1 aborted: Connection closed by peer"})
    tl = Timeline(failed, window="all")
    assert tl.notice.visible
    assert "Run failed (rank" in tl.notice.text and "nothing was recorded to draw" in tl.notice.text
    assert "Traceback" not in tl.notice.text and "s.)" not in tl.notice.text
    assert not tl.strip.figure.visible and not tl.figure.visible   # no empty strips
    empty = Timeline(Run(config=None), window="all")
    assert empty.notice.visible and "Nothing to draw" in empty.notice.text
    ok = Timeline(synthetic_run(events_per_rank=100))
    assert not ok.notice.visible and ok.notice.text == ""
    half = synthetic_run(events_per_rank=100)
    half.status, half.errors = "failed", {0: "RuntimeError: boom"}
    assert "what the ranks recorded before it stopped" in Timeline(half).notice.text


def test_region_table_counts_events_and_clips_totals_to_the_range():
    from nbtools.schema import tables
    from nbtools.ui.timeline.region import region_events, region_table
    t0 = 1_000_000_000
    rows = [(0, "cpu:1", "cpu_op", "a", t0 + 0, 4_000_000),       # 0-4 ms
            (0, "cpu:1", "cpu_op", "a", t0 + 5_000_000, 1_000_000),  # 5-6 ms
            (0, "cpu:1", "cpu_op", "b", t0 + 7_000_000, 2_000_000),  # 7-9 ms
            (1, "cpu:1", "cpu_op", "a", t0 + 3_000_000, 2_000_000)]  # 3-5 ms
    ev = tables.from_columns({k: [r[i] for r in rows] for i, k in enumerate(
        ("rank", "lane", "category", "name", "ts_ns", "dur_ns"))}
        | dict(step=[0] * 4, correlation=[-1] * 4, graph=[False] * 4), tables.EVENT_COLUMNS)
    t = region_table(ev, t0, 2.0, 7.5)
    got = {(w, r): (c, i, wh) for w, r, c, i, wh in t[["what", "rank", "count", "in_ns",
                                                         "whole_ns"]].itertuples(index=False)}
    assert got == {("a", 0): (2, 3_000_000, 5_000_000), ("a", 1): (1, 2_000_000, 2_000_000),
                   ("b", 0): (1, 500_000, 2_000_000)}
    assert list(t["what"]) == ["a", "a", "b"]             # most time inside the range first
    by_cat = region_table(ev, t0, 2.0, 7.5, by="category")
    assert by_cat["count"].sum() == 4
    page = region_events(ev, t0)
    assert list(page["start"]) == [0.0, 5.0, 7.0, 3.0] and list(page["dur"]) == [4, 1, 2, 2]


def test_region_counts_do_not_change_with_the_zoom():
    """The page counts events, so a range gives the same table at any level of detail
    (the boxes merge differently at each zoom)."""
    from nbtools.ui.timeline import Timeline
    from nbtools.ui.timeline.region import region_table
    run = synthetic_run(events_per_rank=2000, seed=3)
    tl = Timeline(run, width=600, live=False)
    page = pd.DataFrame(tl.region.events.data)
    assert len(page) == len(run.events)
    x0, x1 = 2.0, 4.5
    want = region_table(run.events, tl.origin, x0, x1)
    hit = (page["start"] + page["dur"] >= x0) & (page["start"] <= x1)
    assert int(hit.sum()) == int(want["count"].sum())
    boxes_before = len(tl.events_source.data["left"])
    tl.refine(x0, x1)                                       # zoomed in: other boxes
    assert len(tl.events_source.data["left"]) != boxes_before
    assert pd.DataFrame(tl.region.events.data).equals(page)


def test_compile_tooltips_have_no_empty_field():
    from nbtools.ui.timeline import Timeline
    run = synthetic_run(events_per_rank=100)
    ce = run.compile_events
    ce["frame"] = ce["frame"].astype(str).where(ce["kind"] != "graph_break", "")
    tl = Timeline(run)
    m = tl.compile_source.data
    for col in ("frame", "reason", "cache", "dur", "at", "kind"):
        assert all(str(v).strip() and str(v) not in ("nan", "None") for v in m[col]), col
    kinds = list(m["kind"])
    assert m["reason"][kinds.index("compile")] == "first compile of this frame (no guard had failed)"
    assert m["cache"][kinds.index("graph_break")] == "does not apply"
    assert m["frame"][kinds.index("graph_break")] == "not recorded"
    assert m["dur"][kinds.index("graph_break")] == "an instant"


def test_the_static_picture_reads_real_seconds_and_the_failed_line():
    """A saved notebook's PNG (ui/picture.py) of the same plots: the cut axis's ticks in
    real seconds (none inside the cut), and a failed run's line above the footer."""
    from nbtools.results.run import Run
    from nbtools.ui.picture import _notices, _tick_label, picture
    from nbtools.ui.timeline import Timeline
    tl = Timeline(long_compile_run(), width=1100, window="all", live=False)
    label = _tick_label(tl.strip.figure.xaxis[0].formatter)
    c = tl.strip.cut_source.data
    assert float(label(c["right"][0])) == pytest.approx(116.0, abs=0.01)   # the compile's end
    assert label((c["left"][0] + c["right"][0]) / 2) == ""          # inside the cut
    assert label(0.0) == "0"
    failed = Timeline(Run(config=None, status="failed", errors={0: "RuntimeError: boom"}))
    assert _notices(failed.layout) == ["Run failed (rank 0: RuntimeError: boom): nothing was "
                                       "recorded to draw."]
    assert picture(failed.layout).height > 30
