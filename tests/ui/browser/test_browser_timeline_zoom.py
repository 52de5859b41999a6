"""Wheel zoom on a large timeline in real headless Chromium (offline HTML, INLINE BokehJS):
a fresh page with no JS error, at most one box per pixel of the plot, every rank's lanes
drawn in colour at rest and while the wheel turns (the binned boxes, not BokehJS's grey
tenth), the boxes back when the motion stops, and the x range over the data after zooming
in and out. Frame times are measured by benchmarks/bench_timeline_zoom.py, not here.

Needs /usr/bin/chromium; without it the test FAILS (browser.launch), it never skips."""
from __future__ import annotations

import io

from support.browser import ARTIFACTS, check_plots_drawn, ink, open_page, WHERE
from support.runs import synthetic_run

VIEW = "[...Bokeh.index.all_views()].find(v => v.model.name === 'timeline' && v.frame)"
STATE = f"""() => {{ const v = {VIEW}, r = n => v.model.renderers.find(r => r.name === n);
  const d = r("events").data_source.data, y = d.y, per = {{}};
  for (const k of y) per[k] = (per[k] || 0) + 1;
  return {{frame: v.frame.bbox.width, most: Math.max(...Object.values(per)),
          events: r("events").visible, moving: r("events-moving") ? r("events-moving").visible
          : null, x: [v.model.x_range.start, v.model.x_range.end],
          data: [Math.min(...d.left), Math.max(...d.right)], id: v.__nbtools_id}}; }}"""
# The wheel tool on; BokehJS's motion state held (lod_interval/lod_timeout) so that a
# screenshot lands inside it on a loaded machine (hold 0: the figure's own timings).
WHEEL = f"""(hold) => {{ const v = {VIEW};
  v.model.toolbar.active_scroll = v.model.toolbar.tools.find(t => t.type === "WheelZoomTool"
      || (t.constructor && t.constructor.name === "WheelZoomTool"));
  if (v.__lod === undefined) v.__lod = [v.model.lod_interval, v.model.lod_timeout];
  [v.model.lod_interval, v.model.lod_timeout] = hold ? [hold, hold] : v.__lod;
  v.el.scrollIntoView({{block: "center"}});
  const r = v.canvas.el.getBoundingClientRect(), f = v.frame.bbox;
  return {{x: r.left + f.left + f.width / 2, y: r.top + f.top + f.height / 2}}; }}"""
STOP = f"""() => {{ const v = {VIEW}; [v.model.lod_interval, v.model.lod_timeout] = v.__lod;
  Bokeh.documents[0].interactive_stop(); v.request_paint(); }}"""


def _bands_inked(page, where, label) -> dict:
    from PIL import Image
    clip = {k: where[k] for k in ("x", "y", "width", "height")}
    shot = page.screenshot(clip=clip)
    (ARTIFACTS / f"timeline-zoom-{label}.png").write_bytes(shot)
    img = Image.open(io.BytesIO(shot))
    scale = img.height / clip["height"]
    return {rank: ink(img.crop((0, max(0, int((a - clip["y"]) * scale)), img.width,
                                 min(img.height, int((b - clip["y"]) * scale) + 1))))
            for rank, (a, b) in where["bands"].items()}


def test_wheel_zoom_on_a_large_timeline_in_chromium(tmp_path):
    from bokeh.embed import file_html
    from bokeh.resources import INLINE
    from playwright.sync_api import sync_playwright
    from nbtools.ui.timeline import Timeline

    ARTIFACTS.mkdir(exist_ok=True)
    run = synthetic_run(n_ranks=4, events_per_rank=50_000, step_ns=100_000_000, seed=3)
    tl = Timeline(run, width=1100, live=False)
    page_path = tmp_path / "zoom.html"
    page_path.write_text(file_html(tl.layout, INLINE, "zoom"))
    with sync_playwright() as pw, open_page(pw, page_path) as (page, errors):
        page.wait_for_function(f"() => window.Bokeh && !!{VIEW}", timeout=120_000)
        check_plots_drawn(page, "timeline-zoom", [0, 1, 2, 3])
        s = page.evaluate(STATE)
        # at full zoom-out, no row holds more boxes than the plot has pixel columns
        assert s["most"] <= s["frame"], s
        assert s["events"] and s["moving"] is False, s
        ranks = list(range(4))

        at = page.evaluate(WHEEL, 60_000)
        page.mouse.move(at["x"], at["y"])
        for _ in range(4):
            page.mouse.wheel(0, -120)
            page.wait_for_timeout(50)
        page.wait_for_timeout(300)
        s = page.evaluate(STATE)
        assert s["moving"] is True and s["events"] is False, s   # the wheel is turning
        ink = _bands_inked(page, page.evaluate(WHERE, s["id"]), "moving")
        assert sorted(map(int, ink)) == ranks and min(ink.values()) > 1000, ink

        page.evaluate(STOP)
        page.wait_for_timeout(600)
        s = page.evaluate(STATE)
        assert s["events"] and s["moving"] is False, s           # the motion stopped
        zoomed = s["x"][1] - s["x"][0]
        assert zoomed < 0.8 * (s["data"][1] - s["data"][0]), s
        ink = _bands_inked(page, page.evaluate(WHERE, s["id"]), "zoomed-in")
        assert min(ink.values()) > 1000, ink

        page.evaluate(WHEEL, 0)                  # the timeline's own lod timings
        for _ in range(12):
            page.mouse.wheel(0, 120)
            page.wait_for_timeout(50)
        page.wait_for_timeout(1200)
        s = page.evaluate(STATE)
        assert s["events"] and s["moving"] is False, s
        assert s["x"][0] <= s["data"][0] and s["x"][1] >= s["data"][1], s
        ink = _bands_inked(page, page.evaluate(WHERE, s["id"]), "zoomed-out")
        assert min(ink.values()) > 1000, ink
        assert not errors, errors

