"""The timeline in real headless Chromium, offline HTML (INLINE BokehJS), checked on pixels:
names inside boxes, search outlines and totals, the box-selected region's table, flow arrows
(and their switch), the compile strip's markers and hover, the memory lane.

Needs /usr/bin/chromium; without it the test FAILS (browser.launch), it never skips."""
from __future__ import annotations

import re

import numpy as np
import pytest
import pandas as pd

from support.browser import ARTIFACTS, frame_shot, launch, near, open_page
from nbtools.ui.timeline.region import region_table
from support.runs import synthetic_run
from support.paths import H200

DATA = """([name, col]) => {
  const v = [...Bokeh.index.all_views()].find(v => v.model && v.model.name === "timeline");
  const r = v.model.renderers.find(r => r.name === name);
  return [...r.data_source.data[col]];
}"""


def test_timeline_interactions_in_chromium(tmp_path):
    from bokeh.embed import file_html
    from bokeh.resources import INLINE
    from playwright.sync_api import sync_playwright
    from nbtools.ui.timeline import Timeline

    ARTIFACTS.mkdir(exist_ok=True)
    run = synthetic_run(events_per_rank=300, seed=7)
    t = int(run.events["ts_ns"].min())
    span = int((run.events["ts_ns"] + run.events["dur_ns"]).max()) - t
    n = 400
    run.memory = pd.DataFrame({"rank": np.repeat([0, 1], n),
                               "ts_ns": t + np.tile(np.linspace(0, span, n).astype(np.int64), 2),
                               "allocated": np.tile(np.linspace(1, 300, n) * 2**20, 2),
                               "reserved": np.full(2 * n, 400 * 2**20),
                               "graph_pool": np.full(2 * n, 50 * 2**20)})
    tl = Timeline(run, width=1100, live=False)
    page_path = tmp_path / "timeline.html"
    page_path.write_text(file_html(tl.layout, INLINE, "timeline"))
    nccl = run.events[run.events["name"].astype(str).str.contains("nccl", case=False)]

    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            errors = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_path.as_uri(), wait_until="load")
            page.wait_for_function("() => window.Bokeh && Bokeh.index && [...Bokeh.index"
                                   ".all_views()].some(v => v.model.name === 'timeline')",
                                   timeout=30_000)
            # names: refitted by BokehJS at the real width, drawn as dark text in boxes
            names = page.evaluate(DATA, ["event-names", "text"])
            assert len(names) > 10 and any(s.startswith("ncc") for s in names)
            img, _ = frame_shot(page, "timeline", "names")
            assert near(img, (17, 17, 17), 60) > 300, "no names drawn in the boxes"

            # flows: orange segments between the ranks; the switch hides them
            assert near(img, (0xe6, 0x55, 0x0d), 30) > 100, "no flow arrows drawn"
            page.locator("input[type=checkbox]").first.click()
            img_off, _ = frame_shot(page, "timeline", "flows-off")
            assert near(img_off, (0xe6, 0x55, 0x0d), 30) < 0.2 * near(img, (0xe6, 0x55, 0x0d), 30)

            # search: count and total from every event, outlines on every rank
            page.get_by_placeholder("search event names").fill("nccl")
            page.get_by_placeholder("search event names").press("Enter")
            page.wait_for_timeout(500)
            result = page.locator(".bk-Div, div").filter(has_text="events match").last
            text = result.inner_text()
            assert f"{len(nccl)} events match" in text, text
            assert "rank 0:" in text and "rank 1:" in text
            img, clip = frame_shot(page, "timeline", "search")
            magenta = near(img, (0xff, 0x00, 0xaa), 50)
            assert magenta > 200, "search matches not outlined"
            half = img.height // 2     # ranks 0 and 1 each take half the rows
            top, bottom = img.crop((0, 0, img.width, half)), img.crop((0, half, img.width, img.height))
            assert near(top, (0xff, 0x00, 0xaa), 50) > 50 and near(bottom, (0xff, 0x00, 0xaa), 50) > 50

            # region: the box-select tool dragged over the middle third of the axis
            page.evaluate("""() => { const v = [...Bokeh.index.all_views()].find(v =>
                v.model.name === 'timeline' && v.frame);
                const t = v.model.toolbar.tools.find(t => t.type === 'BoxSelectTool'
                    || (t.constructor && t.constructor.name === 'BoxSelectTool'));
                v.model.toolbar.active_drag = t; }""")
            page.wait_for_timeout(300)
            x0, x1 = clip["x"] + clip["width"] / 3, clip["x"] + 2 * clip["width"] / 3
            y = clip["y"] + clip["height"] / 2
            page.mouse.move(x0, y)
            page.mouse.down()
            page.mouse.move((x0 + x1) / 2, y, steps=5)
            page.mouse.move(x1, y, steps=5)
            page.mouse.up()
            page.wait_for_timeout(800)
            summary = page.locator("div").filter(has_text="overlap it").last.inner_text()
            assert "rank(s)" in summary and "shaded" in summary, summary
            lo, hi = (float(v.replace(",", "")) for v in
                      re.search(r"Region ([\d.,]+) to ([\d.,]+) ms", summary).groups())
            third = (tl.window_ms[1] - tl.window_ms[0]) / 3
            assert abs(lo - (tl.window_ms[0] + third)) < 0.1 * third, summary
            assert abs(hi - (tl.window_ms[0] + 2 * third)) < 0.1 * third, summary
            table = page.locator(".slick-row")
            assert table.count() > 3
            rows = table.all_inner_texts()
            assert any("aten::" in r or "nccl" in r or "cuda" in r for r in rows), rows[:5]
            page.screenshot(path=str(ARTIFACTS / "timeline-region.png"), full_page=True)
            # the table: every event overlapping the dragged range, counted once, its time
            # inside the range beside its whole duration (Python's region_table agrees)
            got = page.evaluate("""() => { const t = [...Bokeh.index.all_views()].find(v =>
                v.model.name === 'region-table');
                const d = t.model.source.data;
                return {what: [...d.what], rank: [...d.rank], count: [...d.count],
                        in_ns: [...d.in_ns], whole_ns: [...d.whole_ns]}; }""")
            rng = page.evaluate("""() => { const s = Bokeh.documents[0].get_model_by_name(
                'region-shade'); return [s.left, s.right, s.visible]; }""")
            assert rng[2] and abs(rng[0] - lo) < 1e-3 and abs(rng[1] - hi) < 1e-3, rng
            want = region_table(run.events, tl.origin, rng[0], rng[1])
            assert got["count"] == want["count"].tolist()
            assert got["what"] == want["what"].tolist()
            assert np.allclose(got["in_ns"], want["in_ns"], rtol=1e-6, atol=2)
            assert np.allclose(got["whole_ns"], want["whole_ns"], rtol=1e-6, atol=2)
            assert sum(got["in_ns"]) < sum(got["whole_ns"])      # events reach beyond it
            # the range is shaded: its columns are tinted orange, the rest is not
            img, clip = frame_shot(page, "timeline", "region-shade")
            a = np.asarray(img.convert("RGB"), np.int16)
            tint = ((a[..., 0] - a[..., 2]) > 12) & ((a[..., 0] - a[..., 2]) < 60) & \
                (a.min(axis=2) > 150)
            scale = img.width / clip["width"]
            x_of = lambda ms: int(page.evaluate("""(ms) => { const v = [...Bokeh.index
                .all_views()].find(v => v.model.name === 'timeline' && v.frame);
                return v.frame.x_scale.compute(ms) - v.frame.bbox.left; }""", ms) * scale)
            inside = tint[:, x_of(rng[0]) + 3:x_of(rng[1]) - 3].mean()
            outside = tint[:, :max(x_of(rng[0]) - 3, 1)].mean()
            assert inside > 0.2 and inside > 5 * outside, (inside, outside)

            # compile strip: every marker on its own axis; a hover gives the reason
            img, clip = frame_shot(page, "compile-strip", "compile-strip")
            assert near(img, (0xd6, 0x27, 0x28), 40) > 20, "no recompile marker drawn"
            marks = page.evaluate("""() => { const v = [...Bokeh.index.all_views()].find(v =>
                v.model.name === 'compile-strip' && v.frame);
                const r = v.model.renderers.find(r => r.name === 'compile-strip-marks');
                const d = r.data_source.data, i = [...d.kind].indexOf('recompile');
                const b = v.canvas.el.getBoundingClientRect();
                return {x: b.left + v.frame.x_scale.compute(d.x[i]),
                        y: b.top + v.frame.y_scale.compute(d.y[i])}; }""")
            page.mouse.move(marks["x"], marks["y"])
            page.get_by_text("size mismatch", exact=False).first.wait_for(state="visible",
                                                                          timeout=5_000)

            # memory lane: allocated (green) and graph pools (dark green) per rank
            img, _ = frame_shot(page, "memory-lane", "memory")
            assert near(img, (0x74, 0xc4, 0x76), 30) > 500, "no allocated memory drawn"
            assert near(img, (0x23, 0x8b, 0x45), 30) > 50, "no graph pool drawn"
            assert not errors, errors
        finally:
            browser.close()


BOX_AT = """(i) => {
  const v = [...Bokeh.index.all_views()].find(v => v.model.name === 'timeline' && v.frame);
  v.el.scrollIntoView({block: 'center'});
  const d = v.model.renderers.find(r => r.name === 'events').data_source.data;
  const r = v.canvas.el.getBoundingClientRect();
  return {x: r.left + v.frame.x_scale.compute((d.left[i] + d.right[i]) / 2),
          y: r.top + v.frame.y_scale.compute(d.y[i])};
}"""


def test_tooltip_shows_the_details_and_stack_in_chromium(tmp_path):
    """The hover's name, lane, start, duration and detail line are written in the page from
    codes into small tables: hover one box and read them back."""
    from bokeh.embed import file_html
    from bokeh.resources import INLINE
    from playwright.sync_api import sync_playwright
    from nbtools.schema import tables
    from nbtools.trace.details import DETAIL_COLUMNS
    from nbtools.ui.timeline import Timeline

    run = synthetic_run(events_per_rank=300, seed=7)
    ev = run.events[(run.events["rank"] == 0) & (run.events["category"] == "compute")]
    top = ev.sort_values("dur_ns").iloc[-1]
    text = "inputs: f32[64, 32] · 8,192 bytes in · stack: model.py:12 forward ← train.py:40 step"
    run.event_details = tables.from_columns(dict(rank=[0], ts_ns=[top["ts_ns"]],
                                                 name=[str(top["name"])], detail=[text]),
                                            DETAIL_COLUMNS)
    tl = Timeline(run, width=1100, live=False)
    box = tl.decode()
    i = [k for k, t in enumerate(box["detail"]) if t][0]
    page_path = tmp_path / "tooltip.html"
    page_path.write_text(file_html(tl.layout, INLINE, "tooltip"))
    with sync_playwright() as pw, open_page(pw, page_path, console_errors=False) as (page, errors):
        page.wait_for_function("() => window.Bokeh && Bokeh.index && [...Bokeh.index"
                               ".all_views()].some(v => v.model.name === 'timeline' "
                               "&& v.frame)", timeout=30_000)
        page.wait_for_timeout(500)
        at = page.evaluate(BOX_AT, i)
        page.mouse.move(at["x"], at["y"])
        page.get_by_text(text).first.wait_for(state="visible", timeout=5_000)
        assert page.get_by_text(str(top["name"]), exact=True).first.is_visible()
        assert page.get_by_text(f"compute on {box['lane'][i]}", exact=True).count()
        page.screenshot(path=str(ARTIFACTS / "timeline-tooltip.png"))
        assert not errors, errors



# Every label drawn on the timeline as a page rectangle: the step bands' (baseline top) and
# the boxes' names (baseline middle), 8pt text measured by the page's own canvas
LABEL_BOXES = """() => {
  const v = [...Bokeh.index.all_views()].find(v => v.model && v.model.name === "timeline");
  const ctx = document.createElement("canvas").getContext("2d");
  ctx.font = "8pt sans-serif";
  const out = [];
  for (const [name, top] of [["step-labels", true], ["event-names", false]]) {
    const d = v.model.renderers.find(r => r.name === name).data_source.data;
    for (let i = 0; i < d.text.length; i++) {
      const x = v.frame.x_scale.compute(d.x[i]) + 2, y = v.frame.y_scale.compute(d.y[i]);
      const h = 11, w = ctx.measureText(d.text[i]).width;
      out.push({name, text: d.text[i], x0: x, x1: x + w,
                y0: top ? y : y - h / 2, y1: top ? y + h : y + h / 2});
    }
  }
  return out;
}"""


def test_a_step_is_labelled_once_not_printed_over_its_range_in_chromium(tmp_path):
    # issue 54: a grey "step 13" was printed over "nbtools/step 13" (and "ProfilerStep#2")

    from bokeh.embed import file_html
    from bokeh.resources import INLINE
    from playwright.sync_api import sync_playwright
    from nbtools import load_traces
    from nbtools.ui.timeline import Timeline

    ARTIFACTS.mkdir(exist_ok=True)
    h200 = H200
    run = load_traces([h200 / "tp_off_rank0.json.gz", h200 / "tp_off_rank1.json.gz"])
    page_path = tmp_path / "steps.html"
    page_path.write_text(file_html(Timeline(run, width=1100, live=False).layout, INLINE, "t"))
    with sync_playwright() as pw:
        with open_page(pw, page_path) as (page, errors):
            page.wait_for_function("() => window.Bokeh && Bokeh.index && [...Bokeh.index"
                                   ".all_views()].some(v => v.model.name === 'timeline')",
                                   timeout=30_000)
            frame_shot(page, "timeline", "step-labels")
            boxes = page.evaluate(LABEL_BOXES)
            assert not errors, errors
    steps = [b for b in boxes if b["name"] == "step-labels"]
    names = [b for b in boxes if b["name"] == "event-names"]
    assert any(re.fullmatch(r"nbtools/step \d+", b["text"]) for b in names), names[:5]
    over = [(s["text"], n["text"]) for s in steps for n in names
            if s["x0"] < n["x1"] and n["x0"] < s["x1"] and s["y0"] < n["y1"] and n["y0"] < s["y1"]]
    assert not over, f"labels printed over each other: {over[:5]}"


SUMMARY = """() => {
  const v = [...Bokeh.index.all_views()].find(v => v.model && v.model.name === "summary"
                                                   && v.frame);
  const ctx = document.createElement("canvas").getContext("2d");
  ctx.font = "8pt sans-serif";
  const d = v.model.renderers.map(r => r.data_source).find(s => s && s.data.text_x).data;
  const f = v.frame.bbox;
  const rows = d.text.map((t, i) => ({text: t, right: v.frame.x_scale.compute(d.text_x[i]) + 6
                                      + Math.max(...t.split(String.fromCharCode(10)).map(l => ctx.measureText(l).width))}));
  return {width: f.width, height: f.height, right: f.left + f.width, left: f.left, rows};
}"""


@pytest.mark.parametrize("ranks", [1, 2], ids=["one-rank", "two-ranks"])
def test_the_per_rank_summary_shows_its_text_whole_and_a_rank_has_room(tmp_path, ranks):
    # issue 54: "...idle 0.606 r" cut at the right edge; a one-rank view squashed to ~6 px

    from bokeh.embed import file_html
    from bokeh.resources import INLINE
    from playwright.sync_api import sync_playwright
    from nbtools import load_traces
    from nbtools.ui.timeline import Timeline

    h200 = H200
    run = load_traces([h200 / f"tp_off_rank{r}.json.gz" for r in range(ranks)])
    page_path = tmp_path / "summary.html"
    page_path.write_text(file_html(Timeline(run, live=False).layout, INLINE, "t"))
    with sync_playwright() as pw:
        # narrow: the figure stretches to the page, down to its minimum width
        with open_page(pw, page_path, width=560) as (page, errors):
            page.wait_for_function("() => window.Bokeh && Bokeh.index && [...Bokeh.index"
                                   ".all_views()].some(v => v.model.name === 'summary')",
                                   timeout=30_000)
            page.wait_for_timeout(500)
            got = page.evaluate(SUMMARY)
            frame_shot(page, "summary", f"summary-{ranks}")
            assert not errors, errors
    assert len(got["rows"]) == ranks and all(r["text"] for r in got["rows"]), got
    assert got["height"] >= 20 * ranks, f"a rank's row is {got['height'] / ranks:.0f} px high"
    cut = [r["text"] for r in got["rows"] if r["right"] > got["right"] + 1]
    assert not cut, f"text past the frame's right edge ({got['right']:.0f} px): {cut}"
