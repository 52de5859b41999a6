"""The panel's Compare with rounds in real JupyterLab, driven by headless Chromium from a
fresh page (issue 32, line 1): while the rounds run, Compare and Run are disabled, Stop
shows and the progress line says the round, the side and the run's phase; the verdict and
its timelines land in the panel, also the second time on the same A and B; JupyterLab's
Log Console stays empty (a thread that prints, as a control, does reach it there).

Needs /usr/bin/chromium. Slow: a JupyterLab server, a kernel with a 2-rank Lab, 2 x 8 runs.
Screenshots land in artifacts/ (and /tmp/panel-shots when that folder exists).
"""
from __future__ import annotations

import re

import pytest

from support.browser import check_plots_drawn
from support.jupyter import (log_console, log_level, open_log_console, panel_page, RANKS, serve,
                             shot, wait_status)

pytestmark = pytest.mark.slow

CELLS = [
    "import nbtools\nfrom nbtools import Lab, StepConfig\nlab = Lab(n=2, history=None)\n"
    "print(nbtools.__file__)",
    "p = lab.panel(StepConfig(warmup=1, steps=3, profiled=1)); p",
    # the control: output of a thread the page did not start in a cell goes to the Log Console
    "import threading, time\n"
    "threading.Thread(target=lambda: (time.sleep(2), print('stray thread output'))).start()",
    "lab.close()"]


def _compare(pg, page, k: int) -> str:
    """Press Compare (3 rounds); check the panel while the rounds run and at the end.
    Returns the verdict's text."""
    compare = pg.locator("button.nbtools-compare").first
    run = pg.locator("button.nbtools-run").first
    stop = pg.locator("button.nbtools-stop").first
    progress = pg.locator(".nbtools-compare-status").first
    compare.click()
    # while the rounds run: progress with the round, side and phase; buttons disabled
    pg.wait_for_function("() => /round 2 of 3 · [AB] \\(run \\d+ of 12\\)/.test("
                         "document.querySelector('.nbtools-compare-status').textContent)",
                         timeout=300_000)
    text = progress.inner_text()
    assert compare.is_disabled() and run.is_disabled() and stop.is_visible(), text
    assert re.search(r"\d+\.\d s", text), text                  # elapsed
    if k == 0:
        pg.wait_for_function("() => /run [0-9a-f]{8}: /.test(document.querySelector("
                             "'.nbtools-compare-status').textContent)", timeout=60_000)
        progress.scroll_into_view_if_needed()
        shot(page, "compare-running")
    pg.wait_for_function("() => /3 of 3 rounds compared \\(12 runs\\)/.test(document."
                         "querySelector('.nbtools-compare-status').textContent)",
                         timeout=600_000)
    assert not compare.is_disabled() and not run.is_disabled() and not stop.is_visible()
    verdict = pg.locator(".nbtools-comparison").first.inner_text()
    assert "A or B changed" not in verdict and "3 rounds" in verdict, verdict
    pg.wait_for_function("() => [...Bokeh.index.all_views()].filter(v => v.frame && "
                         "v.el.isConnected && v.model.title && /^[AB] /.test("
                         "v.model.title.text)).length >= 2", timeout=60_000)
    check_plots_drawn(pg, f"compare-{k}", RANKS, min_plots=5)
    return verdict


@pytest.mark.timeout(1500)
def test_panel_compare_in_rounds_shows_progress_and_verdict_twice(tmp_path):
    def test(browser, server):
        page, run_button = panel_page(browser, server, "compare.ipynb", CELLS)
        pg = page.page
        run_button.click()
        first = wait_status(pg, r"#([0-9a-f]{8}) done", 150)
        pg.locator(".nbtools-seed input").first.fill("1")
        pg.locator(".nbtools-seed input").first.press("Enter")
        pg.wait_for_timeout(500)
        run_button.click()
        wait_status(pg, r"#([0-9a-f]{8}) done", 150, not_id=first)
        rounds = pg.locator(".nbtools-rounds input").first
        rounds.fill("3")
        rounds.press("Enter")
        pg.wait_for_timeout(500)
        # At its default level (warning) the Log Console shows the output JupyterLab
        # could not give to a cell: a thread's prints and displays (issue 32's raw reprs).
        open_log_console(pg)
        assert log_console(pg) == []

        texts = [_compare(pg, page, k) for k in range(2)]
        assert all(texts), texts
        pg.locator(".nbtools-compare").first.scroll_into_view_if_needed()
        shot(page, "compare-twice")
        page.assert_no_errors()
        # Stop: the rounds end after the run in progress; the finished ones are compared
        pg.locator("button.nbtools-compare").first.click()
        pg.wait_for_function("() => /round 2 of 3/.test(document.querySelector("
                             "'.nbtools-compare-status').textContent)", timeout=300_000)
        pg.locator("button.nbtools-stop").first.click()
        pg.wait_for_function("() => /^stopped: \\d of 3 rounds compared/.test(document."
                             "querySelector('.nbtools-compare-status').textContent)",
                             timeout=300_000)
        verdict = pg.locator(".nbtools-comparison").first.inner_text()
        assert "stopped after 1 of 3 rounds" in verdict, verdict
        assert not pg.locator("button.nbtools-run").first.is_disabled()
        pg.locator(".nbtools-compare").first.scroll_into_view_if_needed()
        shot(page, "compare-stopped")
        assert log_console(pg) == [], log_console(pg)
        # at info it shows every output, the cells' own too; none of the panel's, and no
        # "No such comm" from views closed while the page still sent to them
        log_level(pg, "info")
        pg.wait_for_timeout(1000)
        shown = log_console(pg)
        assert not [t for t in shown if re.search(
            r"No such comm|VBox\(|HBox\(|round \d|Traceback", t)], shown

        page.run_cell(2)       # the control: a stray thread's print does reach the console
        pg.wait_for_function("() => [...document.querySelectorAll('.jp-LogConsolePanel "
                             ".jp-OutputArea-output')].some(e => e.textContent.includes("
                             "'stray thread output'))", timeout=30_000)
        log_level(pg, "warning")
        pg.wait_for_timeout(1000)
        assert any("stray thread output" in t for t in log_console(pg)), log_console(pg)
        page.run_cell(3)
        pg.wait_for_function("() => /\\[\\d+\\]/.test([...document.querySelectorAll("
                             "'.jp-CodeCell .jp-InputPrompt')][3].textContent)",
                             timeout=120_000)
    serve(tmp_path, test)


@pytest.mark.timeout(900)
def test_a_panel_whose_kernel_stopped_says_so_and_disables_its_buttons(tmp_path):
    """Issue 32, line 5: in the page that showed it, a panel whose kernel was shut down
    (from another tab, the REST API, or a restart) says so and its buttons are disabled;
    before, Run silently did nothing (page error "Cannot send")."""
    from support.jupyter import api

    def test(browser, server):
        page, run_button = panel_page(browser, server, "stopped.ipynb", CELLS[:2])
        pg = page.page
        run_button.click()
        wait_status(pg, r"#([0-9a-f]{8}) done", 150)
        assert pg.locator(".nbtools-kernel-stopped").count() == 0
        assert not run_button.is_disabled()
        for k in api(server.base, server.token, "/api/kernels"):
            api(server.base, server.token, f"/api/kernels/{k['id']}", method="DELETE")
        note = pg.locator(".nbtools-kernel-stopped").first
        note.wait_for(timeout=60_000)
        assert "kernel of this panel has stopped" in note.inner_text()
        for name in ("run", "compare"):
            assert pg.locator(f"button.nbtools-{name}").first.is_disabled(), name
        assert pg.locator(".nbtools-seed input").first.is_disabled()
        note.scroll_into_view_if_needed()
        shot(page, "kernel-stopped")
        run_button.click(force=True)         # a disabled button: nothing sent, no error
        pg.wait_for_timeout(1000)
        # A kernel deleted while its stdout thread flushes sends a message cut in half
        # (ipykernel: "zmq gc socket requested during shutdown"), and JupyterLab's socket
        # throws on it (CI, 2026-12-02). That is the kernel's death, not the panel: every
        # other page error still fails the test.
        page.errors = [e for e in page.errors if not re.search(
            r"Kernel message validation error: .*is not valid JSON", e)]
        page.assert_no_errors()
    serve(tmp_path, test)
