"""The notebook is a document (issue 24), in real JupyterLab and Chromium: Run All of
00-quickstart (the tests' CPU sizes), Save; a new tab on the live kernel draws every figure
without re-running a cell (canvas pixels); the kernel restarted, then shut down: tab switching raises
nothing; a reload shows each figure's static picture with its note and no errors; nbconvert
--to html of the saved file (not executed) holds a picture per figure; the saved file stays
under 2 MB. Screenshots of each state land in artifacts/ (notebook-doc-*.png).

Needs /usr/bin/chromium; without it this test FAILS.
"""
from __future__ import annotations

import json
import re
import subprocess

import nbformat
import pytest

from support.browser import ARTIFACTS, check_plots_drawn
from support.jupyter import (api, FIGURE_MIME, MAX_SAVED, Page, PYTHON, RANKS, serve, Tab,
                             write_notebook)
from support.paths import NOTEBOOKS
from support.notebooks import cell_errors, small

pytestmark = pytest.mark.slow

STEM = "00-quickstart"


def _figures(path) -> list:
    """The saved file's figure outputs (what the extension renders), in order."""
    nb = json.loads(path.read_text())
    return [o["data"] for c in nb["cells"] if c["cell_type"] == "code"
            for o in c.get("outputs", []) if FIGURE_MIME in o.get("data", {})]


def _all_errors(page, into: list) -> None:
    """Every page error and console error from now on (not only Bokeh's)."""
    page.on("pageerror", lambda e: into.append(f"page error: {e}"))
    page.on("console", lambda m: into.append(f"console: {m.text}") if m.type == "error" else None)


def _touch_pages(pages) -> None:
    """What a person does after a kernel event: switch side tabs, resize the window."""
    for pg in pages:
        pg.wait_for_timeout(3000)
        pg.bring_to_front()
        for tab in ("Running Terminals and Kernels", "File Browser"):
            pg.locator(f".lm-TabBar-tab[title^='{tab}']").first.click()
            pg.wait_for_timeout(500)
            pg.locator(f".lm-TabBar-tab[title^='{tab}']").first.click()
            pg.wait_for_timeout(500)
        pg.set_viewport_size({"width": 1200, "height": 1000})
        pg.wait_for_timeout(1000)
        pg.set_viewport_size({"width": 1500, "height": 1100})
        pg.wait_for_timeout(1000)


@pytest.mark.timeout(900)
def test_saved_notebook_shows_figures_live_and_static(tmp_path):
    def test(browser, server):
        name = f"{STEM}.ipynb"
        path = server.root / name
        write_notebook(path, source=NOTEBOOKS / name, parameters=small(tmp_path))
        first = Page(browser, server, name)
        shot = lambda pg, stage: pg.screenshot(path=str(ARTIFACTS / f"notebook-doc-{stage}.png"))
        assert first.page.locator(".jp-mod-dirty").count() == 0, "the tutorial opened modified"

        first.run_all(timeout_s=700)
        first.page.wait_for_timeout(2000)
        first.assert_no_errors()
        plots = check_plots_drawn(first.page, "notebook-doc-run-all", RANKS, min_plots=2)
        assert any(p["timeline"] for p in plots), plots
        shot(first.page, "run-all")
        size = first.save()
        assert size < MAX_SAVED, f"saved {name} is {size / 1e6:.2f} MB"
        saved = nbformat.read(str(path), as_version=4)      # test_notebooks' headless checks
        assert not cell_errors(saved), cell_errors(saved)
        assert any((tmp_path / "runs").glob("*/run.json")), "no run saved under HISTORY"
        figures = _figures(path)
        assert len(figures) >= 3, f"{len(figures)} figure outputs saved (plot, compare, panel)"
        assert all("image/png" in f for f in figures), "a figure output without its picture"
        print(f"saved {name}: {size / 1e6:.2f} MB, {len(figures)} figure outputs", flush=True)

        # a new tab on the same live kernel: every figure drawn without re-running a cell
        second = Tab(browser, server, name)
        errors = []
        _all_errors(second.page, errors)
        second.page.wait_for_function(
            "(n) => window.Bokeh && [...Bokeh.index.all_views()].filter(v => v.frame"
            " && v.el.isConnected).length >= n", arg=2, timeout=60_000)
        second.page.wait_for_timeout(2000)
        second.assert_no_errors()
        check_plots_drawn(second.page, "notebook-doc-new-tab", RANKS, min_plots=2)
        shot(second.page, "new-tab")
        assert not errors, errors

        print("new tab drawn; restarting the kernel", flush=True)
        # a kernel restart (its widget models gone, the views still on both pages), then the
        # kernel shut down: switching tabs and resizing must raise nothing ("Cannot send")
        _all_errors(first.page, errors)
        for k in api(server.base, server.token, "/api/kernels"):
            api(server.base, server.token, f"/api/kernels/{k['id']}/restart", method="POST")
        _touch_pages((first.page, second.page))
        first.assert_no_errors()
        second.assert_no_errors()
        shot(first.page, "kernel-restarted")
        assert not errors, errors
        print("kernel restarted; shutting it down", flush=True)
        for k in api(server.base, server.token, "/api/kernels"):
            api(server.base, server.token, f"/api/kernels/{k['id']}", method="DELETE")
        print("kernel deleted", flush=True)
        _touch_pages((first.page, second.page))
        shot(first.page, "kernel-stopped")
        assert not errors, errors
        first.page.close()

        print("kernel stopped, tabs switched; reloading", flush=True)
        # a reload with the kernel gone: each figure is its static picture, with its note
        second.page.reload()
        second.page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=90_000)
        static = second.page.locator(".nbtools-figure-static img")
        static.nth(len(figures) - 1).wait_for(timeout=90_000)
        second.page.wait_for_timeout(3000)
        drawn = static.evaluate_all(
            "els => els.map(e => [e.complete && e.naturalWidth, e.getBoundingClientRect().width,"
            " e.alt])")
        assert len(drawn) == len(figures) and all(w > 100 and shown > 100 for w, shown, _ in drawn), drawn
        assert all("re-run the cell" in alt for _, _, alt in drawn), drawn
        second.assert_no_errors()
        second.page.locator(".nbtools-figure-static").first.scroll_into_view_if_needed()
        shot(second.page, "reload-no-kernel")
        assert not errors, errors

        print("static pictures shown; nbconvert", flush=True)
        # nbconvert of the saved file, not executed: a picture per figure
        out = subprocess.run([PYTHON, "-m", "jupyter", "nbconvert", "--to", "html",
                              "--output-dir", str(tmp_path), str(path)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        html = (tmp_path / f"{STEM}.html").read_text()
        pictures = re.findall(r'<img [^>]*src="data:image/png;base64,', html)
        assert len(pictures) >= len(figures), f"{len(pictures)} pictures for {len(figures)} figures"
        print(f"nbconvert: {len(pictures)} pictures for {len(figures)} figures", flush=True)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.goto((tmp_path / f"{STEM}.html").as_uri())
        page.locator("img").nth(len(figures) - 1).scroll_into_view_if_needed()
        shot(page, "nbconvert")
    serve(tmp_path, test)
