"""The GPU-waits lane (ui/timeline/waits.py) in real headless Chromium, offline HTML: two
ranks of an eager tensor-parallel step on 2 x H200 (the package's traces), whose GPU waited
on its host. The lane is drawn (host-wait bars in their colour on each rank's row, on the
streams' x range), and hovering a bar names where the host was.

Needs /usr/bin/chromium; without it the test FAILS (browser.launch), it never skips."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from support.browser import ARTIFACTS, frame_shot, near, open_page
from nbtools import load_traces
from nbtools.common.package_data import h200_traces_dir

pytestmark = pytest.mark.slow

BAR_AT = """() => {
  const v = [...Bokeh.index.all_views()].find(v => v.model.name === 'waits-lane' && v.frame);
  v.el.scrollIntoView({block: 'center'});
  const d = v.model.renderers.find(r => r.name === 'waits-gaps').data_source.data;
  let i = 0;                                  // the longest host-wait bar
  for (let k = 0; k < d.left.length; k++)
    if (d.kind[k] === 'host wait' && d.right[k] - d.left[k] > d.right[i] - d.left[i]) i = k;
  const r = v.canvas.el.getBoundingClientRect();
  return {x: r.left + v.frame.x_scale.compute((d.left[i] + d.right[i]) / 2),
          y: r.top + v.frame.y_scale.compute(d.y[i]), host: d.host[i],
          x_start: v.model.x_range.start, x_end: v.model.x_range.end,
          rows: [...new Set(d.y)].length};
}"""
TIMELINE_X = """() => { const m = Bokeh.documents[0].get_model_by_name('timeline');
  return [m.x_range.start, m.x_range.end, m.x_range.id]; }"""


def test_the_waits_lane_shows_host_waits_per_rank_and_where_the_host_was(tmp_path):
    from bokeh.embed import file_html
    from bokeh.resources import INLINE
    from playwright.sync_api import sync_playwright
    from nbtools.ui.timeline import Timeline

    ARTIFACTS.mkdir(exist_ok=True)
    for r in (0, 1):
        shutil.copy(h200_traces_dir() / f"tp_off_rank{r}.json.gz", tmp_path)
    run = load_traces(tmp_path)
    tl = Timeline(run, width=1200)
    page_file = tmp_path / "waits.html"
    page_file.write_text(file_html(tl.layout, INLINE, "waits"))
    with sync_playwright() as pw, open_page(pw, page_file) as (page, errors):
        page.wait_for_function("() => window.Bokeh && Bokeh.index && [...Bokeh.index"
                               ".all_views()].some(v => v.model.name === 'waits-lane' "
                               "&& v.frame)", timeout=30_000)
        bar = page.evaluate(BAR_AT)
        assert bar["rows"] == 2, bar                      # one row per GPU rank
        # the lane moves with the streams: the timeline's own x range
        lane_x = page.evaluate("""() => Bokeh.documents[0].get_model_by_name(
            'waits-lane').x_range.id""")
        assert lane_x == page.evaluate(TIMELINE_X)[2]
        img, clip = frame_shot(page, "waits-lane", "waits")
        host = near(img, (0x8c, 0x56, 0x4b), 30)
        assert host > 400, f"host-wait bars: {host} pixels"
        # each rank's row holds host-wait bars
        a = np.asarray(img.convert("RGB"), np.int16)
        brown = (np.abs(a - np.array((0x8c, 0x56, 0x4b))).max(axis=2) <= 30)
        half = brown.shape[0] // 2
        assert brown[:half].sum() > 100 and brown[half:].sum() > 100
        page.mouse.move(bar["x"], bar["y"])
        page.get_by_text("the host was in", exact=False).first.wait_for(
            state="visible", timeout=5_000)
        assert bar["host"] and "% of the gap" in bar["host"]
        assert not errors, errors
