"""An exported report in real headless Chromium: loads offline, draws, answers a hover.

Needs /usr/bin/chromium (Debian's chromium package). Without it this test FAILS: a
report nobody has seen render is not tested.
"""
from __future__ import annotations

import io
import re

import pytest

from nbtools.report.html import export_html
from nbtools.ui.timeline.data import fmt_ns
from support.runs import synthetic_run

from support.browser import ARTIFACTS, launch as _launch

# The first run's timeline: scroll it into view, pick its widest unmerged compute kernel,
# and map that box's centre to page coordinates through BokehJS's own scales.
FIND_KERNEL = """(runId) => {
  const pv = [...Bokeh.index.all_views()].find(v => v.frame && v.model.title
      && v.model.title.text.includes(runId)
      && v.model.renderers.some(r => r.name === "events"));
  if (!pv) return null;
  pv.el.scrollIntoView({block: "center"});
  const d = pv.model.renderers.find(r => r.name === "events").data_source.data;
  let best = -1, width = -1;
  for (let i = 0; i < d.left.length; i++) {
    const w = d.right[i] - d.left[i];
    if (d.count[i] == 1 && d.cat_i[i] == 0 && w > width) { best = i; width = w; }   // compute
  }
  const box = pv.canvas.el.getBoundingClientRect();
  // names travel as codes; the hover's formatter holds the table they index
  const f = pv.model.toolbar.tools.find(t => t.formatters && t.formatters["@name_i"])
      .formatters["@name_i"].args;
  const names = (f instanceof Map ? f.get("table") : f.table).data.name;
  return {name: names[d.name_i[best]], boxes: d.left.length, left: d.left[best], right: d.right[best],
          rank: d.rank[best], step: d.step[best],
          x: box.left + pv.frame.x_scale.compute((d.left[best] + d.right[best]) / 2),
          y: box.top + pv.frame.y_scale.compute(d.y[best])};
}"""



def _when(run, box) -> str:
    """What the tooltip's start must say (written in the page from left and the step's start)."""
    origin = int(run.events["ts_ns"].min())
    st = run.steps[(run.steps["rank"] == box["rank"]) & (run.steps["step"] == box["step"])]
    into = round(box["left"] * 1e6 - (int(st["ts_ns"].iloc[0]) - origin))
    return f"{box['left']:,.3f} ms · step {box['step']} + {fmt_ns([into])[0]}"


def test_report_renders_offline_and_hovers(tmp_path):
    from PIL import Image
    from playwright.sync_api import sync_playwright

    a = synthetic_run(events_per_rank=600, seed=5)
    b = synthetic_run(events_per_rank=600, seed=6, step_ns=2_000_000)
    path = export_html(tmp_path / "report.html", [a, b], notes="Browser check.",
                       comparisons=[(a, b)])
    with sync_playwright() as pw:
        browser = _launch(pw)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors, requests = [], []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(path.as_uri(), wait_until="load")
            page.wait_for_function("() => window.Bokeh && Bokeh.index && "
                                   "[...Bokeh.index.all_views()].some(v => v.frame)", timeout=20_000)
            canvases = page.locator("canvas")
            assert canvases.count() >= 3
            page.wait_for_timeout(500)    # let the first paint finish

            kernel = page.evaluate(FIND_KERNEL, a.run_id)
            assert kernel and kernel["boxes"] > 0
            page.wait_for_timeout(300)    # after scrolling
            kernel = page.evaluate(FIND_KERNEL, a.run_id)
            shot = page.screenshot()
            pixels = Image.open(io.BytesIO(shot)).convert("RGB")
            colours = pixels.getcolors(maxcolors=1 << 16)
            assert colours is None or len(colours) > 20, "the page looks blank"
            # the kernel's own pixel carries a compute colour, not the background
            px = pixels.getpixel((int(kernel["x"]), int(kernel["y"])))
            assert px != (255, 255, 255), f"no glyph drawn at the kernel: {px}"

            page.mouse.move(kernel["x"], kernel["y"])
            tip = page.get_by_text(kernel["name"]).first
            tip.wait_for(state="visible", timeout=5_000)
            # one box under the cursor, one tooltip entry; its time is relative (ms on the
            # axis, time into the step), never epoch nanoseconds
            starts = page.get_by_text(re.compile(r" ms · step \d+ \+ ")).all_inner_texts()
            assert starts == [_when(a, kernel)], (starts, _when(a, kernel))
            assert page.get_by_text(fmt_ns([round((kernel["right"] - kernel["left"]) * 1e6)])[0],
                                    exact=True).count()
            assert not page.get_by_text(re.compile(r"\d{16,} ns")).count()
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "report_timeline.png"))

            assert not errors, errors
            remote = [u for u in requests if not u.startswith(("file:", "data:", "blob:"))]
            assert not remote, f"the report fetched from the network: {remote}"
        finally:
            browser.close()


def test_every_runs_timeline_of_a_packed_report_draws(tmp_path):
    """BokehJS and the figures travel gzip-packed (report/page.py): the page unpacks them
    and every run's timeline draws, each with its own rank lanes and boxes."""
    from playwright.sync_api import sync_playwright
    from support.browser import check_plots_drawn, open_page
    runs = [synthetic_run(events_per_rank=300, seed=10 + k) for k in range(6)]
    path = export_html(tmp_path / "six.html", runs)
    assert 'type="application/gzip-base85"' in path.read_text()
    with sync_playwright() as pw, open_page(pw, path) as (page, errors):
        page.wait_for_function("() => window.Bokeh && Bokeh.index && [...Bokeh.index"
                               ".all_views()].filter(v => v.frame && v.model.renderers.some("
                               "r => r.name === 'events')).length === 6", timeout=30_000)
        plots = check_plots_drawn(page, "packed-report", [0, 1], min_plots=6)
        titles = {p["title"] for p in plots if p["timeline"]}
        assert all(any(r.run_id in t for t in titles) for r in runs), titles
        assert not errors, errors


def test_a_browser_that_cannot_unpack_the_figures_says_so(tmp_path):
    from playwright.sync_api import sync_playwright
    run = synthetic_run(events_per_rank=200, seed=7)
    path = export_html(tmp_path / "r.html", [run])
    with sync_playwright() as pw:
        browser = _launch(pw)
        try:
            page = browser.new_page()
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.add_init_script("delete window.DecompressionStream")
            page.goto(path.as_uri(), wait_until="load")
            note = page.locator(".nbtools-figures-note")
            note.wait_for(state="visible", timeout=10_000)
            assert "need a browser that unpacks gzip" in note.inner_text()
            assert page.get_by_text(f"Run #{run.run_id}").count()     # the text is all there
            assert not errors, errors
        finally:
            browser.close()


def test_missing_chromium_fails_rather_than_skips():
    with pytest.raises(pytest.fail.Exception, match="Chromium not found"):
        _launch(None, "/nonexistent/chromium")
