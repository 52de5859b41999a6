"""Labels read whole in headless Chromium (issue 54): the exploration plot's title, cut at
the figure's right edge ("...B is 1.89x faster (:"), now wraps inside it.

Needs /usr/bin/chromium; without it the test FAILS (browser.launch), it never skips."""
from __future__ import annotations

from support.browser import ARTIFACTS, check_plots_drawn, open_page
from nbtools import StepConfig
from nbtools.results.exploration import Exploration, summary_line
from nbtools.ui.exploration import figure

# each line of a figure's title as drawn (its width in the title's own font) and the room
# it has: from the frame's left, where it starts, to the figure's right edge
TITLE = """() => {
  const v = [...Bokeh.index.all_views()].find(v => v.model && v.model.title && v.frame);
  const t = v.model.title, ctx = document.createElement("canvas").getContext("2d");
  ctx.font = `${t.text_font_style} ${t.text_font_size} ${t.text_font}`;
  return {text: t.text, width: v.el.getBoundingClientRect().width - v.frame.bbox.left,
          lines: t.text.split(String.fromCharCode(10)).map(l => ctx.measureText(l).width)};
}"""


def test_the_exploration_plot_title_is_whole_inside_the_figure(tmp_path):
    from bokeh.embed import file_html
    from bokeh.resources import INLINE
    from playwright.sync_api import sync_playwright
    start = StepConfig(scenario="tp-mlp-infer")
    ex = Exploration(start=start, best=start.replace(compile="default"),
                     kept=[{"compile": "default"}],
                     rows=[dict(change="compile='default'", ratio=0.529214, low=0.51,
                                high=0.55, outcome="kept", verdict="B is 1.89x faster")])
    page_path = tmp_path / "explore.html"
    page_path.write_text(file_html(figure(ex), INLINE, "explore"))
    with sync_playwright() as pw:
        with open_page(pw, page_path) as (page, errors):
            page.wait_for_function("() => window.Bokeh && Bokeh.index && "
                                   "[...Bokeh.index.all_views()].length > 0", timeout=30_000)
            check_plots_drawn(page, "explore-title", ranks=[])
            got = page.evaluate(TITLE)
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "explore-title.png"))
            assert not errors, errors
    flat = " ".join(got["text"].split())
    assert " ".join(summary_line(ex).split()) in flat, got["text"]      # nothing dropped
    wide = [w for w in got["lines"] if w > got["width"] - 10]
    assert not wide, f"title lines {got['lines']} px in a {got['width']:.0f} px figure"


def test_an_ab_of_unprofiled_runs_draws_no_empty_figure_and_says_why(tmp_path):
    # issue 54: the demo report's A/B drew an empty figure under "Timelines aligned at each
    # run's first profiled step" for its unprofiled runs (profiled=0: no events)
    from playwright.sync_api import sync_playwright
    from nbtools import export_html
    from support.runs import synthetic_run

    def unprofiled(seed):
        run = synthetic_run(seed=seed, events_per_rank=200)
        run.events = run.events.iloc[:0]
        run.steps = run.steps[run.steps["phase"] != "profiled"]
        return run

    a, b = unprofiled(1), unprofiled(2)
    path = export_html(tmp_path / "ab.html", [a, b], comparisons=[(a, b)])
    text = path.read_text(encoding="utf-8")
    assert "Timelines aligned" not in text
    with sync_playwright() as pw:
        with open_page(pw, path) as (page, errors):
            page.wait_for_timeout(1500)
            why = page.locator(".nbtools-no-timelines")
            assert why.count() == 1 and "neither run was profiled" in why.inner_text()
            # whatever figures the page has are drawn (none empty)
            n = page.evaluate("() => window.Bokeh && Bokeh.index ? "
                              "[...Bokeh.index.all_views()].filter(v => v.frame).length : 0")
            if n:
                check_plots_drawn(page, "ab-unprofiled", ranks=[0, 1])
            page.screenshot(path=str(ARTIFACTS / "ab-unprofiled.png"), full_page=True)
            assert not errors, errors
