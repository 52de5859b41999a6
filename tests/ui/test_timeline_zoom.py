"""What keeps wheel zoom smooth on a 1M-event timeline, on the Python side (no browser):
at most one box per pixel of the plot at full zoom-out with every lane's busy time kept,
the few binned boxes drawn while the wheel turns, the graph-replay hatch as spans.
test_browser_timeline_zoom.py checks the same page in Chromium; benchmarks/
bench_timeline_zoom.py measures its frame times."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from support.runs import synthetic_run

WIDTH = 1100


@functools.lru_cache(maxsize=1)
def _million():
    from nbtools.ui.timeline import Timeline
    run = synthetic_run(n_ranks=8, events_per_rank=125_000, step_ns=100_000_000, seed=1)
    return run, Timeline(run, width=WIDTH, live=False)


def test_full_zoom_out_draws_a_box_per_pixel_at_most_and_keeps_each_lanes_busy_time():
    run, tl = _million()
    d = tl.events_source.data
    assert len(run.events) >= 1_000_000 and tl.stats["events"] == len(run.events)
    # the plot is the figure less its row labels ("r0 GPU 0 stream 13": 986 px of 1100 in
    # Chromium, at 5 px or more per 8pt character)
    longest = max(len(s) for s in tl._labels)
    assert tl.lod_px <= WIDTH - 5 * longest, tl.lod_px
    y = np.asarray(d["y"])
    per_row = np.bincount(y)
    assert per_row.max() <= tl.lod_px, (per_row.max(), tl.lod_px)
    # parts inside the whole: per lane (its depth rows together), the boxes' busy time is
    # the events' summed durations
    left, right = np.asarray(d["left"]), np.asarray(d["right"])
    count = np.asarray(d["count"])
    busy = np.where(count > 1, np.asarray(d["busy_ns"], np.float64), (right - left) * 1e6)
    lane = np.asarray(tl._rows, object)[y]
    drawn = {k: busy[lane == k].sum() for k in set(lane.tolist())}
    ev = run.events
    want = ev.assign(k="r" + ev["rank"].astype(str) + " " + ev["lane"].astype(str)) \
        .groupby("k")["dur_ns"].sum().to_dict()
    assert drawn.keys() == want.keys()
    for k, v in want.items():
        assert drawn[k] == pytest.approx(v, rel=1e-5), k


def test_while_moving_a_few_binned_boxes_stand_for_every_row():
    from nbtools.ui.timeline.data import moving_data
    from nbtools.ui.timeline.figure import MOVING_BOXES
    _, tl = _million()
    d = tl.events_source.data
    m = tl.moving_source.data
    assert len(m["left"]) <= MOVING_BOXES < len(d["left"])
    assert set(np.asarray(m["y"]).tolist()) == set(np.asarray(d["y"]).tolist())
    # every drawn box lies inside a block of its own row, coloured as one of its boxes
    for row in np.unique(d["y"]).tolist():
        bl, br = (np.asarray(m[k])[np.asarray(m["y"]) == row] for k in ("left", "right"))
        sel = np.asarray(d["y"]) == row
        left, right = np.asarray(d["left"])[sel], np.asarray(d["right"])[sel]
        i = np.searchsorted(bl, left, side="right") - 1
        assert (i >= 0).all() and (right <= br[i] + 1e-9).all(), row
    assert set(np.asarray(m["cat_i"]).tolist()) <= set(np.asarray(d["cat_i"]).tolist())
    again = moving_data(d, MOVING_BOXES)
    assert np.array_equal(again["left"], m["left"])
    # drawn instead of the boxes from BokehJS's lodstart to its lodend
    fig = tl.figure
    moving = fig.select_one({"name": "events-moving"})
    assert moving is not None and not moving.visible
    assert {"lodstart", "lodend"} <= set(fig.js_event_callbacks)
    # the boxes return after BokehJS's last motion timer, so that timer is kept short
    from nbtools.ui.timeline.interactions import SETTLE_MS
    assert fig.lod_timeout < SETTLE_MS < 500


def test_moving_data_bins_a_small_run_and_keeps_single_events_opaque():
    from nbtools.ui.timeline.data import moving_data
    d = dict(left=[0.0, 1.0, 2.0, 50.0], right=[0.5, 1.5, 3.5, 60.0], y=[0, 0, 0, 1],
             cat_i=[0, 0, 1, 4], count=[1, 1, 1, 1], busy_ns=[0.0] * 4,
             alpha=[1.0, 1.0, 1.0, 0.3])
    m = moving_data(d, 4)                       # two rows, two blocks each
    assert m["y"].tolist() == [0, 1]
    assert m["left"].tolist() == [0.0, 50.0] and m["right"].tolist() == [3.5, 60.0]
    assert m["cat_i"].tolist() == [1, 4]           # 1.5 ms of category 1 beats 2 x 0.5 ms
    assert m["alpha"][0] == pytest.approx(2.5 / 3.5) and m["alpha"][1] == pytest.approx(0.3)
    assert len(moving_data(dict(d, left=[], right=[]), 4)["left"]) == 0


def test_graph_replays_hatch_as_spans_of_touching_boxes():
    from nbtools.ui.timeline.data import spans
    s = spans([0.0, 1.0, 1.05, 5.0, 0.0], [1.0, 1.04, 2.0, 6.0, 3.0], [0, 0, 0, 0, 1], gap=0.1)
    assert s["left"].tolist() == [0.0, 5.0, 0.0]
    assert s["right"].tolist() == [2.0, 6.0, 3.0]
    assert s["y"].tolist() == [0, 0, 1]
