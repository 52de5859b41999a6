"""The panel's Suggest and Explore in real JupyterLab, driven by headless Chromium from a
fresh page (issue 33, line 4): Suggest lists the advice for the run on screen with its
evidence; Explore runs lab.explore in the background with its progress in the panel,
the other buttons disabled and Stop shown, its table growing per A/B, then the verdict and
the code in the panel; nothing reaches JupyterLab's Log Console; no page error.

Needs /usr/bin/chromium. Slow: a JupyterLab server, a kernel with a 2-rank Lab, an
exploration of a few A/Bs. Screenshots land in artifacts/ (and /tmp/panel-shots when
that folder exists).
"""
from __future__ import annotations

import re

import pytest

from support.jupyter import log_console, open_log_console, panel_page, serve, shot, wait_status
from support.paths import TESTS

pytestmark = pytest.mark.slow

# A person's small model whose sequence length changes every step, compiled with static
# shapes (tests/support/explore_steps.py, imported as a notebook imports its own module): Dynamo
# recompiles at every new length, the advice says dynamic shapes, and explore proves it.
MODEL = (f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
         "from nbtools import Lab\nfrom support.explore_steps import SLOW as slow, WORKLOAD as wl\n"
         "lab = Lab(n=2, history=None)")
CELLS = [MODEL, "p = lab.panel(wl, slow); p", "lab.close()"]


# what of the panel's summary (not inside its sideways-scrolling box) ends past the cell
_SUMMARY_FITS = """() => {
  const right = document.querySelector('.jp-OutputArea-output').getBoundingClientRect().right;
  const s = document.querySelector('.nbtools-summary');
  const box = s.querySelector('div[style*="overflow-x"]');
  return [s, ...s.querySelectorAll('*')].filter(d => !box.contains(d.parentElement) || d === box)
    .filter(d => d.getBoundingClientRect().right > right + 1)
    .map(d => d.tagName + ' ' + Math.round(d.getBoundingClientRect().right) + ' > ' + Math.round(right));
}"""


def _status(pg) -> str:
    return pg.locator(".nbtools-advice-status").first.inner_text()


def _set(pg, cls: str, value: str) -> None:
    box = pg.locator(f".{cls} input").first
    box.fill(value)
    box.press("Enter")
    pg.wait_for_timeout(500)


@pytest.mark.timeout(1200)
def test_suggest_and_explore_in_the_panel_of_a_fresh_page(tmp_path):
    def test(browser, server):
        page, run_button = panel_page(browser, server, "advice.ipynb", CELLS)
        pg = page.page
        run_button.click()
        run_id = wait_status(pg, r"#([0-9a-f]{8}) done", 200)
        # issue 54: the run's header wraps inside the cell and only the table scrolls (the
        # widget grew to the table's width and the header was cut at "...parameters on thi")
        pg.get_by_text("parameters on this rank").first.wait_for(timeout=30_000)
        assert pg.evaluate(_SUMMARY_FITS) == [], pg.evaluate(_SUMMARY_FITS)
        open_log_console(pg)

        pg.locator("button.nbtools-suggest").first.click()
        advice = pg.locator(".nbtools-advice").first
        advice.get_by_text(f"why run #{run_id} takes its time").wait_for(timeout=60_000)
        text = advice.inner_text()
        assert "dynamic='dynamic'" in text and "recompile(s)" in text, text
        # the reading comes first, then the moves
        assert text.index("ran on the CPU") < text.index("dynamic='dynamic'"), text
        assert not pg.locator("button.nbtools-try").first.is_disabled()
        advice.scroll_into_view_if_needed()
        shot(page, "advice-suggest")

        pg.locator(".nbtools-advice-rounds select").first.select_option("2")
        _set(pg, "nbtools-advice-budget", "150")
        pg.locator("button.nbtools-explore").first.click()
        pg.wait_for_function("() => /Explore, A\\/B of .+: round \\d of 2 · [AB] \\(run \\d+ "
                             "of 8\\) · \\d+ s of the 150 s budget left/"
                             ".test(document.querySelector('.nbtools-advice-status')"
                             ".textContent)", timeout=300_000)
        for name in ("explore", "suggest", "run", "compare"):
            assert pg.locator(f"button.nbtools-{name}").first.is_disabled(), name
        assert pg.locator("button.nbtools-advice-stop").first.is_visible()
        assert re.search(r"\d+\.\d s", _status(pg)), _status(pg)        # elapsed
        pg.locator(".nbtools-advice-status").first.scroll_into_view_if_needed()
        shot(page, "advice-explore-running")
        # the table grows as each A/B ends, before the exploration does
        pg.wait_for_function("() => document.querySelector('.nbtools-explore-table "
                             ".nbtools-steps') !== null || /Explore done/.test("
                             "document.querySelector('.nbtools-advice-status').textContent)",
                             timeout=400_000)
        pg.wait_for_function("() => /Explore done in \\d/.test(document.querySelector("
                             "'.nbtools-advice-status').textContent)", timeout=600_000)
        result = pg.locator(".nbtools-advice-result").first
        shown = result.inner_text()
        assert "dynamic='dynamic'" in shown and "as code" in shown, shown
        assert re.search(r"kept|not resolved faster|lack of budget|no difference bigger|"
                         r"resolved worse|dropped in the screen", shown), shown
        # issue 43.6: the screen, the cost of each step and the budget spent are shown
        assert "screen" in shown and re.search(r"\d+ runs, \d+ s", shown), shown
        assert re.search(r"spent \d+ s of a 150 s budget", shown), shown
        assert "nan" not in shown.lower().split(), shown
        assert not pg.locator("button.nbtools-advice-stop").first.is_visible()
        assert not pg.locator("button.nbtools-explore").first.is_disabled()
        result.scroll_into_view_if_needed()
        shot(page, "advice-explore-done")
        assert log_console(pg) == [], log_console(pg)
        page.assert_no_errors()
        page.run_cell(2)
        pg.wait_for_function("() => /\\[\\d+\\]/.test([...document.querySelectorAll("
                             "'.jp-CodeCell .jp-InputPrompt')][2].textContent)",
                             timeout=120_000)
    serve(tmp_path, test)
