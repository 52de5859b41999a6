"""The panel in a fresh JupyterLab page, 1280 px wide, as a person reads it (issue 44): preset
to a config that has not run, it says so (not the newest run of another config); while
Compare's rounds run, the last verdict is gone, every other action is disabled and no label
is cut (Stop included); Export's error shows beside Export; and the notebook saved after it
carries a picture of the panel holding the comparison.

Needs /usr/bin/chromium; without it this test FAILS."""
from __future__ import annotations

import re

import pytest

from support.jupyter import CLIPPED, panel_page, pictures, serve, wait_status

pytestmark = pytest.mark.slow

CELLS = [
    "from nbtools import Lab, StepConfig\nlab = Lab(n=2, history=None)\n"
    "other = lab.run(StepConfig(warmup=1, steps=2, profiled=1, seed=5)); print(other.run_id)",
    "p = lab.panel(StepConfig(warmup=1, steps=3, profiled=1)); p",
    "lab.close()"]
# every action the panel offers beside Compare, by its button's class or label
ACTIONS = ["button.nbtools-run", "button.nbtools-suggest", "button.nbtools-explore",
           "button:has-text('Export HTML')", "button:has-text('Save Perfetto trace')",
           "button:has-text('Load its config')", ".nbtools-history select",
           ".widget-checkbox:has-text('replace') input"]


def _text(pg, cls: str) -> str:
    return pg.locator(cls).first.inner_text()


def _set(pg, cls: str, value: str) -> None:
    box = pg.locator(f"{cls} input").first
    box.fill(value)
    box.press("Enter")
    pg.wait_for_timeout(500)          # the value reaches the kernel


@pytest.mark.timeout(1500)
def test_the_panel_does_one_thing_at_a_time_and_says_it_where_it_was_asked(
        tmp_path):

    def test(browser, server):
        name = "work.ipynb"
        page, run = panel_page(browser, server, name, CELLS, width=1280)
        pg = page.page
        other = re.search(r"\b([0-9a-f]{8})\b", page.outputs()[0]).group(1)
        # preset to a config not run yet: said, and not another config's run
        summary = _text(pg, ".nbtools-summary")
        assert "has not run yet" in summary and "steps=3" in summary, summary
        assert other not in summary

        run.click()
        first = wait_status(pg, r"#([0-9a-f]{8}) done", 150)
        _set(pg, ".nbtools-seed", "1")
        run.click()
        wait_status(pg, r"#([0-9a-f]{8}) done", 150, not_id=first)
        compare = pg.locator("button.nbtools-compare").first
        compare.click()                                      # one round: the runs as they are
        pg.locator(".nbtools-comparison", has_text="verdict").first.wait_for(timeout=120_000)

        _set(pg, ".nbtools-rounds", "3")
        compare.click()
        pg.wait_for_function("() => /Compare: round 1 of 3/.test(document.querySelector("
                             "'.nbtools-compare-status').textContent)", timeout=60_000)
        # at once: the last verdict is gone (it is not this comparison's)
        assert "verdict" not in _text(pg, ".nbtools-comparison")
        pg.wait_for_function("() => /round 2 of 3/.test(document.querySelector("
                             "'.nbtools-compare-status').textContent)", timeout=300_000)
        held = {a: pg.locator(a).first.is_disabled() for a in ACTIONS}
        assert all(held.values()), held
        stop = pg.locator("button.nbtools-stop").first
        assert stop.is_visible() and stop.inner_text().strip() == "Stop"
        assert pg.evaluate(CLIPPED) == []                   # Stop's label whole, every other
        stop.scroll_into_view_if_needed()
        page.shot("panel-work-comparing")
        pg.wait_for_function("() => /3 of 3 rounds compared/.test(document.querySelector("
                             "'.nbtools-compare-status').textContent)", timeout=600_000)
        assert "verdict" in _text(pg, ".nbtools-comparison")
        back = {a: pg.locator(a).first.is_disabled() for a in ACTIONS}
        assert not any(back.values()), back

        # Export's error beside Export, not in the error box at the panel's top
        (server.root / "a-file").write_text("")
        path = pg.locator(".widget-text:has-text('export to') input").first
        path.fill(str(server.root / "a-file" / "report.html"))
        path.press("Enter")
        pg.wait_for_timeout(2000)     # the path reaches the kernel (a loaded CI box is slow)
        export = pg.locator("button:has-text('Export HTML')").first
        export.click()
        said = pg.locator(".nbtools-export-status", has_text="not written").first
        said.wait_for(timeout=60_000)
        below = said.bounding_box()["y"] - export.bounding_box()["y"]
        assert 0 < below < 80, f"the error is {below:.0f} px from the button"
        assert _text(pg, ".nbtools-error") == ""
        said.scroll_into_view_if_needed()
        page.shot("panel-work-export-error")
        assert pg.evaluate(CLIPPED) == []
        page.assert_no_errors()

        pg.wait_for_timeout(3000)            # the kernel redraws the picture a second later
        page.save()
        panel = next(text for what, text, _ in pictures(server.root / name) if what == "panel")
        assert "compare: A #" in panel and "verdict (step_ms, B over A" in panel, panel[-1500:]
        assert "3 rounds" in panel
        page.run_cell(2)
        pg.wait_for_function("() => /\\[\\d+\\]/.test([...document.querySelectorAll("
                             "'.jp-CodeCell .jp-InputPrompt')][2].textContent)",
                             timeout=120_000)
    serve(tmp_path, test)
