"""The panel's live strip in real JupyterLab, from a fresh page, driven by headless Chromium
(issue 45, line 3): while a real 2-rank CPU run runs, each rank's row shows its process's
CPU and the line under it moves (its newest sample and its points change from one second
to the next); when the run ends the strip says so; no error on the page.

Needs /usr/bin/chromium. Slow: a JupyterLab server, a kernel with a 2-rank Lab, one run of
about 4 s of steps."""
from __future__ import annotations

import pytest

from support.jupyter import panel_page, serve, wait_status

pytestmark = pytest.mark.slow

CELLS = [
    "from nbtools import Lab, StepConfig\nfrom nbtools.widgets.panel import Panel\n"
    "lab = Lab(n=2, history=None)\n"
    "def spin(ctx):\n"
    "    import time, torch\n"
    "    t = time.perf_counter()\n"
    "    while time.perf_counter() - t < 0.015:\n"
    "        pass\n"
    "    return torch.zeros(())",
    "p = Panel(lab, StepConfig(scenario='custom', warmup=1, steps=250, profiled=0, "
    "capture='off'), step_fn=spin)\np.widget",
    "lab.close()"]
ROWS = """() => [...document.querySelectorAll('.nbtools-signals .nbtools-signal-row')].map(r =>
  ({rank: r.dataset.rank, newest: r.dataset.newest, samples: +r.dataset.samples,
    points: r.querySelector('polyline').getAttribute('points'),
    state: r.querySelector('.nbtools-signal-state').textContent, text: r.textContent}))"""


@pytest.mark.timeout(900)
def test_the_strip_moves_while_a_cpu_run_runs(tmp_path):
    def test(browser, server):
        page, run_button = panel_page(browser, server, "signals.ipynb", CELLS)
        pg = page.page
        strip = pg.locator(".nbtools-signals").first
        strip.wait_for(timeout=30_000)
        assert "shown while a run runs" in strip.inner_text()
        run_button.click()
        pg.wait_for_function("() => document.querySelectorAll('.nbtools-signals "
                             ".nbtools-signal-row[data-samples]:not([data-samples=\"0\"])')"
                             ".length === 2", timeout=150_000)
        first = pg.evaluate(ROWS)
        pg.wait_for_timeout(1500)
        second = pg.evaluate(ROWS)
        page.shot("signals-strip-running")
        assert [r["rank"] for r in second] == ["0", "1"], second
        for a, b in zip(first, second):
            assert int(b["newest"]) > int(a["newest"]), (a, b)      # newer samples arrived
            assert b["points"] != a["points"] and b["points"].count(",") >= 3, (a, b)
            assert "process CPU" in b["text"] and "%" in b["text"], b
            assert b["state"] in ("live", "run done") or b["state"].startswith("idle"), b
        wait_status(pg, r"#([0-9a-f]{8}) done", 300)
        pg.wait_for_function("() => [...document.querySelectorAll('.nbtools-signal-state')]"
                             ".every(e => e.textContent === 'run done')", timeout=30_000)
        page.shot("signals-strip-done")
        page.assert_no_errors()
        page.run_cell(2)

    serve(tmp_path, test)
