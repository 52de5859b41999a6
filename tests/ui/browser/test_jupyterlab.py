"""The notebooks as a person sees them, in real JupyterLab driven by headless Chromium,
each test from a fresh page: Run All of 01 (at the tests' CPU sizes; 00-quickstart's is
test_notebook_document's), and the panel (Run, flip compile, Run, pick the first run in the history, Compare). After
each step every Bokeh figure must be drawn: no JavaScript error, every rank's lanes hold
coloured boxes on the screenshot (tests/support/browser.py), and the y-range covers every lane in
BokehJS's state. The saved notebook must stay small (BokehJS is not written into it).

Needs /usr/bin/chromium (Debian's chromium package). Without it these tests FAIL. Slow on
2 cores: real engines run every notebook. Screenshots land in artifacts/.
"""
from __future__ import annotations

import pytest

from support.browser import check_plots_drawn
from support.jupyter import (CLIPPED, MAX_SAVED, RANKS, Page, serve, wait_status, wait_title,
                             write_notebook)
from support.notebooks import cell_errors, small
from support.paths import NOTEBOOKS

pytestmark = pytest.mark.slow   # a JupyterLab server, kernels with labs, Chromium

PANEL_CELLS = [
    "from nbtools import Lab, StepConfig\nlab = Lab(n=2, history=None)",
    "p = lab.panel(); p",
    # a second panel and three plots, for the size of the saved notebook
    "h = lab.history\ndisplay(lab.panel(), h[0].plot(), h[1].plot(),"
    " lab.compare(h[0], h[1]).plot())",
    # as every tutorial ends (a kernel stopped on a loaded machine can be killed before
    # ipyparallel's exit hook stops the engines; that path is not this test's)
    "lab.close()"]



@pytest.mark.timeout(900)
# 00-quickstart's Run All is test_notebook_document's first half (with these checks)
@pytest.mark.parametrize("stem", ["01-cuda-graphs-tp-inference"])
def test_notebook_run_all_draws_every_figure(stem, tmp_path):
    def test(browser, server):
        name = f"{stem}.ipynb"
        write_notebook(server.root / name, source=NOTEBOOKS / name, parameters=small(tmp_path))
        page = Page(browser, server, name)
        page.run_all(timeout_s=700)
        page.page.wait_for_timeout(2000)
        page.assert_no_errors()
        plots = check_plots_drawn(page.page, stem, RANKS, min_plots=2)
        assert any(p["timeline"] for p in plots), plots
        page.shot("run-all")
        size = page.save()
        assert size < MAX_SAVED, f"saved {name} is {size / 1e6:.1f} MB"
        # test_notebooks' headless checks, on what the page saved (01 runs only here)
        import nbformat
        saved = nbformat.read(str(server.root / name), as_version=4)
        assert not cell_errors(saved), cell_errors(saved)
        skipped = [i for i, c in enumerate(saved.cells)
                   if c.cell_type == "code" and c.execution_count is None]
        assert not skipped, f"cells not run: {skipped}"
        assert any((tmp_path / "runs").glob("*/run.json")), "no run saved under HISTORY"
    serve(tmp_path, test)


@pytest.mark.timeout(900)
def test_panel_draws_after_every_action(tmp_path):
    def test(browser, server):
        write_notebook(server.root / "panel.ipynb", PANEL_CELLS)
        page = Page(browser, server, "panel.ipynb")
        pg = page.page
        page.run_cell(0)
        page.run_cell(1)
        run_button = pg.locator("button.nbtools-run").first
        run_button.wait_for(timeout=150_000)          # kernel + Lab(n=2) start
        assert pg.evaluate("() => window.Bokeh !== undefined"), "BokehJS is not in the page"

        run_button.click()
        first = wait_status(pg, r"#([0-9a-f]{8}) done", 150)
        wait_title(pg, first)
        check_plots_drawn(pg, "panel-run1", RANKS, min_plots=2)

        pg.locator(".nbtools-compile select").first.select_option("default")
        pg.locator(".nbtools-backend select").first.select_option("eager")
        pg.wait_for_timeout(500)       # let the widget values reach the kernel
        run_button.click()
        second = wait_status(pg, r"#([0-9a-f]{8}) done", 200, not_id=first)
        wait_title(pg, second)
        check_plots_drawn(pg, "panel-run2", RANKS, min_plots=2)
        summary = pg.locator(".nbtools-summary").first.inner_text()
        assert second in summary and "compile=default" in summary, summary

        pg.locator(".widget-select select").first.select_option(index=0)     # the history
        wait_status(pg, r"showing run #([0-9a-f]{8}) from the history", 30, not_id=second)
        wait_title(pg, first)
        check_plots_drawn(pg, "panel-history", RANKS, min_plots=2)

        pg.get_by_role("button", name="Compare A / B").first.click()
        pg.wait_for_function("() => [...Bokeh.index.all_views()].filter(v => v.frame && "
                             "v.el.isConnected && v.model.title && /^[AB] /.test("
                             "v.model.title.text)).length >= 2", timeout=60_000)
        plots = check_plots_drawn(pg, "panel-compare", RANKS, min_plots=5)
        assert sum(p["timeline"] for p in plots) >= 3, plots     # panel's, A's and B's
        pg.locator(".nbtools-timeline").first.scroll_into_view_if_needed()
        page.shot("compare")
        page.assert_no_errors()

        page.run_cell(2)                  # a second panel and three more plots
        # shown plots only: a run without memory=True hides its memory lane
        pg.wait_for_function("() => [...Bokeh.index.all_views()].filter(v => v.frame && "
                             "v.el.isConnected && v.model.visible).length >= 17",
                             timeout=60_000)
        check_plots_drawn(pg, "panel-more", RANKS, min_plots=17)
        page.assert_no_errors()
        size = page.save()
        assert size < MAX_SAVED, f"saved panel.ipynb is {size / 1e6:.1f} MB"
        page.run_cell(3)
        page.page.wait_for_function("() => /\\[\\d+\\]/.test([...document.querySelectorAll("
                                    "'.jp-CodeCell .jp-InputPrompt')][3].textContent)",
                                    timeout=120_000)
    serve(tmp_path, test)


# the text of the elements matched that does not fit them (wider than their box)
_CUT = """(sel) => [...document.querySelectorAll(sel)].flatMap(el => [el, ...el.querySelectorAll('*')])
  .filter(d => d.clientWidth && d.scrollWidth > d.clientWidth + 1)
  .map(d => (d.textContent || '').trim().slice(0, 60))"""


@pytest.mark.timeout(900)
def test_panel_fits_1280_and_marks_what_the_lab_would_refuse(tmp_path):
    """Issue 26 in a real JupyterLab page 1280 px wide: no control clipped, every default
    shown as 'default', a choice the lab would refuse marked with its reason on hover, Run
    disabled (reason on hover) while the controls hold such a config, and Export listing
    this panel's run."""
    def test(browser, server):
        write_notebook(server.root / "fit.ipynb", PANEL_CELLS[:2] + [PANEL_CELLS[-1]])
        page = Page(browser, server, "fit.ipynb", width=1280)
        pg = page.page
        page.run_cell(0)
        page.run_cell(1)
        run_button = pg.locator("button.nbtools-run").first
        run_button.wait_for(timeout=150_000)
        pg.wait_for_timeout(1000)
        assert pg.evaluate(CLIPPED) == []
        for field in ("parallel", "seq_schedule"):
            assert pg.locator(f".nbtools-{field} select").first.input_value() == "default"
        for field in ("batch", "seq_len"):
            assert pg.locator(f".nbtools-{field} input").first.input_value() == "default"
        # (ipywidgets writes an option's spaces as no-break spaces)
        options = [t.replace("\xa0", " ") for t in
                   pg.locator(".nbtools-cudagraph option").all_inner_texts()]
        assert options == ["off", "✗ manual"], options        # CPU ranks: needs CUDA
        # the reasons on hover: over the control's name (ipywidgets shows no tooltip on a
        # described dropdown)
        assert "needs CUDA" in pg.locator(".nbtools-cudagraph .widget-label span[title]").first.get_attribute("title")
        pg.locator(".nbtools-cudagraph select").first.select_option(index=1)
        pg.wait_for_function("() => document.querySelector('button.nbtools-run').disabled",
                             timeout=30_000)
        assert "needs CUDA" in run_button.get_attribute("title")
        # issue 54: the reason shows beside Run, whole, not only on hover
        reason = pg.locator(".nbtools-refused-reason").first
        assert reason.is_visible()
        assert "cudagraph='manual' needs CUDA" in reason.inner_text(), reason.inner_text()
        assert pg.evaluate(_CUT, ".nbtools-refused-reason") == []
        # and every checkbox's hover text is words, not markup
        titles = pg.evaluate("""() => [...document.querySelectorAll(
            '.widget-checkbox [title]')].map(e => e.getAttribute('title'))""")
        assert titles and not [t for t in titles if "<" in t or "style=" in t], titles
        page.shot("refused-1280")
        pg.locator(".nbtools-cudagraph select").first.select_option(index=0)
        pg.wait_for_function("() => !document.querySelector('button.nbtools-run').disabled",
                             timeout=30_000)
        run_button.click()
        run_id = wait_status(pg, r"#([0-9a-f]{8}) done", 150)
        picked = pg.locator(".nbtools-export-runs select option:checked").all_inner_texts()
        assert len(picked) == 1 and run_id in picked[0], picked
        assert pg.evaluate(CLIPPED) == []
        pg.locator(".nbtools-run").first.scroll_into_view_if_needed()
        page.shot("ran-1280")
        page.assert_no_errors()
        page.run_cell(2)
    serve(tmp_path, test)
