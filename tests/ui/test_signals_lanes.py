"""The signals lanes' data (ui/timeline/signals.py): a row per rank and signal in SIGNALS'
order, scaled to the GPU's limits, the reasons in words, a spike of one sample kept past
the level of detail, bands for phases and compiles, numbers only per sample. Fast: no lab,
no browser (tests/lab/test_signals_lab.py draws a real run's in Chromium)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from nbtools.analysis import samples as S
from nbtools.schema.signals import SAMPLE_COLUMNS, SIGNALS
from nbtools.schema import tables
from nbtools.results.run import Run
from nbtools.ui.timeline import Timeline
from nbtools.ui.timeline.signals import MAX_POINTS, signal_rows, signals_data

MS = 1_000_000


def _run(n=50, ranks=(0, 1)):
    ts = np.arange(n) * 20 * MS
    clock = np.full(n, 1980.0)
    clock[n // 2] = 1410.0                          # one low sample
    bits = np.zeros(n)
    bits[10:12] = 0x4 | 0x1                          # power cap (and idle) for two samples
    frames = [S.from_wire(r, dict(ts_ns=ts, values=dict(
        cpu_pct=np.full(n, 50.0), sm_clock_mhz=clock, throttle=bits,
        gpu_util_pct=np.linspace(0, 100, n)))) for r in ranks]
    steps = pd.DataFrame({"rank": np.repeat(list(ranks), 3), "step": [0, 1, 2] * len(ranks),
                          "phase": ["warmup", "measured", "measured"] * len(ranks),
                          "ts_ns": [0, 300 * MS, 600 * MS] * len(ranks), "dur_ns": 200 * MS})
    run = Run(config=None, steps=tables.from_columns(
        {k: steps[k].tolist() for k in tables.STEP_COLUMNS}, tables.STEP_COLUMNS),
        ranks={r: {"machine": {"sm_max_mhz": 1980.0}} for r in ranks})
    run.samples = tables.concat(frames, SAMPLE_COLUMNS)
    return run


def test_rows_follow_the_registry_and_say_their_scale():
    run = _run()
    data, bands, labels, texts = signals_data(run, [0, 1], 0)
    assert signal_rows(run.samples)[:4] == [(0, "gpu_util_pct"), (0, "sm_clock_mhz"),
                                             (0, "throttle"), (0, "cpu_pct")]
    assert labels[0] == "r0 GPU busy (%)" and labels[1] == "r0 SM clock (of 1,980 MHz)"
    assert labels[2] == "r0 clock reasons (throttling)" and labels[4].startswith("r1 ")
    clock = np.asarray(data["row"]) == 1
    tops = np.asarray(data["top"])[clock]
    assert np.isclose(tops.min(), 1.4 - 0.8) and np.isclose(tops.max(), 1.4 - 0.8 * 1410 / 1980)
    # the throttle row: drawn where a throttling bit is set, its words in the texts table
    th = np.asarray(data["row"]) == 2
    drawn = np.asarray(data["top"])[th] < np.asarray(data["bottom"])[th]
    assert drawn.sum() == 2
    words = [texts[i] for i in np.asarray(data["text"])[th][drawn]]
    assert words == ["GPU idle, power cap"] * 2 and "none" in texts
    # numbers only, in small dtypes (the exported page's bytes)
    assert {np.asarray(data[k]).dtype.kind for k in data} <= {"f", "i"}
    assert np.asarray(data["left"]).dtype == np.float32
    # phases shaded behind each rank's rows
    assert len(bands["left"]) == 4 and set(bands["color"]) == {"#fdd0a2", "#c6dbef"}


def test_a_long_run_keeps_a_one_sample_dip_past_the_level_of_detail():
    run = _run(n=20 * MAX_POINTS, ranks=(0,))
    data, _, labels, _ = signals_data(run, [0], 0, only={"sm_clock_mhz"})
    assert list(labels.values()) == ["r0 SM clock (of 1,980 MHz)"]
    assert len(data["left"]) <= 2 * MAX_POINTS
    assert np.asarray(data["value"]).min() == 1410.0        # the dip survived the bins


def test_the_timeline_draws_the_lanes_on_its_own_x_range_and_hides_them_without_samples():
    run = _run()
    tl = Timeline(run)
    assert tl.signals.figure.visible and tl.signals.figure.x_range is tl.figure.x_range
    assert len(tl.signals.rows_source.data["label"]) == 8
    tl.update(Run(config=None))                          # the same figure, data replaced
    assert not tl.signals.figure.visible and len(tl.signals.source.data["left"]) == 0
    only = Timeline(run, signals=["cpu_pct"])
    assert only.signals.rows_source.data["label"] == ["r0 process CPU (of 50 %)",
                                                      "r1 process CPU (of 50 %)"]


def test_every_lane_says_what_x_zero_is_for_a_run_without_profiled_events():
    """1 x H200, session 23: the 24 drift runs (profiled=0) drew their signals under an axis
    reading 'ms since the first profiled event', of which they had none."""
    tl = Timeline(_run())
    said = {f.xaxis[0].axis_label for f in (tl.figure, tl.memory.figure, tl.signals.figure)}
    assert said == {"ms since the run's first step"}


def test_a_saved_pictures_signal_lanes_hold_their_values():
    # issue 54: a saved notebook reopened without its kernel drew the lanes as empty
    # outlines: the hover's transparent boxes over the values replaced their pixels, and
    # their line_alpha=0 outlines were drawn black
    from PIL import ImageColor

    from nbtools.ui import picture
    from nbtools.ui.timeline.signals import PALETTE, SignalsLane
    run = _run()
    from bokeh.models import Range1d
    lane = SignalsLane(dict(width=900), "canvas", Range1d(0.0, 1000.0))
    lane.update(run, [0, 1], 0)
    rgb = np.asarray(picture.picture(lane.figure).convert("RGB"), np.int16)
    order = [s.name for s in SIGNALS]
    for name in ("cpu_pct", "gpu_util_pct"):
        want = np.array(ImageColor.getrgb(PALETTE[order.index(name)]), np.int16)
        # 0.85 alpha on white, as BokehJS blends it
        want = (0.85 * want + 0.15 * 255).astype(np.int16)
        near = (np.abs(rgb - want).max(axis=2) <= 12).sum()
        assert near > 2000, (name, near)
    assert ((rgb < 40).all(axis=2)).sum() < 2000          # no black outlines over the lanes
