"""Issue 44, "Done when" 1: every text a run brings (its error, op names, the step's
name, notes, file names) is shown as text wherever nbtools makes HTML, never run. Real
runs on a CPU lab: a step whose profiled op carries hostile markup in its name, a step
that raises it; a folder of traces holding those names, beside a damaged file whose name
is the markup. Each page nbtools writes is opened in a fresh Chromium page: the title is
what nbtools set, no injected script ran, no injected element exists (in the page or in
a Bokeh view's shadow root), and the text reads literally where a person looks (the
error box, the timeline's notice, a tooltip, the search result).

Seen before: a step raising ValueError('<img src=x onerror=...>') ran script in the
exported report (its title changed) and in `view --html`."""
from __future__ import annotations

import html
from pathlib import Path

import pytest

from nbtools import StepConfig, export_html
from nbtools.cli.main import main
from nbtools.results.errors import RunFailed
from nbtools.results.comparison import Comparison
from nbtools.results.history import History
from nbtools.results.trace_export import write_kineto
from nbtools.ui.html import describe_error, flags_html, comparison_html, run_html

from support.browser import ARTIFACTS, open_page

LAB = "shared"     # the worker's lab (tests/conftest.py): this module counts no history

# markup, a script, quotes and an ampersand; NAME has no "/" so it can be a file's name
NAME = "<img src=x onerror=\"document.title='pwned'\"> \"q\" & 'a' <svg onload=window.__pwned=2>"
HOSTILE = NAME + " <script>window.__pwned=1</script>"
CUSTOM = StepConfig(scenario="custom", warmup=0, steps=1, profiled=1)


def hostile_op(ctx):
    import torch
    with torch.profiler.record_function(HOSTILE):
        x = torch.ones(256).mul(2)
    with torch.profiler.record_function(NAME):     # a second name the search lists
        return x.sum()


def hostile_error(ctx):
    """Rank 1 fails; rank 0 (no collective to wait in) records its steps and ops: the
    report draws them and says why the run failed in the notice above."""
    if ctx.rank == 1:
        raise ValueError(HOSTILE)
    return hostile_op(ctx)


hostile_op.__name__ = NAME        # the step's name is the run's title in every page


# What a person could be attacked by, looked for in the page and in every shadow root
# (Bokeh draws Divs and tooltips there); and what reads as text there.
INSPECT = """() => {
  const roots = [document];
  for (let i = 0; i < roots.length; i++)
    for (const el of roots[i].querySelectorAll("*"))
      if (el.shadowRoot) roots.push(el.shadowRoot);
  const injected = [];
  for (const r of roots)
    for (const el of r.querySelectorAll("img, svg[onload], [onerror], [onload]"))
      if (el.tagName === "IMG" || el.hasAttribute("onerror") || el.hasAttribute("onload"))
        injected.push(el.outerHTML.slice(0, 120));
  const scripts = [...document.scripts].filter(s => s.textContent.includes("__pwned=1")
      && !(s.type || "").includes("json")).length;
  const text = roots.map(r => (r.body || r).innerText || r.textContent || "").join("\\n");
  return {title: document.title, pwned: window.__pwned ?? null, injected, scripts, text};
}"""


def check_page(pw, path: Path, title: str, shows: list, bokeh: bool) -> dict:
    """The page at ``path`` in a fresh Chromium page: nothing injected ran or exists, the
    title is ``title``, and each of ``shows`` reads literally in its text."""
    with open_page(pw, path, console_errors=False) as (page, errors):
        if bokeh:
            page.wait_for_function("() => window.Bokeh && Bokeh.index && "
                                   "[...Bokeh.index.all_views()].some(v => v.frame)",
                                   timeout=30_000)
            page.wait_for_timeout(500)
        got = page.evaluate(INSPECT)
        page.screenshot(path=str(ARTIFACTS / f"escaping-{path.stem}.png"), full_page=True)
        assert got["title"] == title, (path.name, got["title"])
        assert got["pwned"] is None and got["injected"] == [] and got["scripts"] == 0, got
        for s in shows:
            assert s in got["text"], (path.name, s, got["text"][:2000])
        assert not errors, errors
        return got


@pytest.fixture(scope="module")
def runs(lab, tmp_path_factory):
    ok = lab.run(hostile_op, CUSTOM)
    with pytest.raises(RunFailed) as e:
        lab.run(hostile_error, CUSTOM)
    failed = e.value.run
    assert ok.ok and (ok.events["name"].astype(str) == HOSTILE).any()
    assert HOSTILE in str(e.value)
    return ok, failed, e.value


def _hover_name(page, name: str):
    """Put the cursor on the timeline's box named ``name`` (found through BokehJS's own
    data and scales, as tests/ui/browser/test_browser.py does)."""
    where = page.evaluate("""(name) => {
      const pv = [...Bokeh.index.all_views()].find(v => v.frame
          && v.model.renderers.some(r => r.name === "events"));
      pv.el.scrollIntoView({block: "center"});
      const d = pv.model.renderers.find(r => r.name === "events").data_source.data;
      const f = pv.model.toolbar.tools.find(t => t.formatters && t.formatters["@name_i"])
          .formatters["@name_i"].args;
      const names = (f instanceof Map ? f.get("table") : f.table).data.name;
      const k = names.indexOf(name);
      const i = [...d.name_i].findIndex(v => v === k);
      if (i < 0) return null;
      const box = pv.canvas.el.getBoundingClientRect();
      return {x: box.left + pv.frame.x_scale.compute((d.left[i] + d.right[i]) / 2),
              y: box.top + pv.frame.y_scale.compute(d.y[i])};
    }""", name)
    assert where is not None, "no box carries the hostile name"
    page.wait_for_timeout(300)
    page.mouse.move(where["x"], where["y"])


def test_hostile_run_text_is_shown_never_run_on_every_page(runs, tmp_path):
    from playwright.sync_api import sync_playwright
    ok, failed, err = runs
    ARTIFACTS.mkdir(exist_ok=True)
    h = History(tmp_path / "runs")
    h.add(ok)
    h.add(failed)
    traces = tmp_path / "traces"
    write_kineto(ok, traces)
    (traces / f"{NAME}.json").write_text("not a trace")    # named in the run's flags
    report = export_html(tmp_path / "report.html", [ok, failed], notes=HOSTILE, title=NAME,
                         comparisons=[(ok, ok)])
    assert main(["view", str(h.folder), "--html", str(tmp_path / "view-history.html")]) == 0
    assert main(["view", str(traces), "--html", str(tmp_path / "view-traces.html")]) == 0
    figure = Path(failed.plot().save(tmp_path / "figure-failed.html"))
    timeline = Path(ok.plot().save(tmp_path / "figure-ok.html"))
    # what the panel's HTML widgets are given (their innerHTML), one page of them
    widgets = tmp_path / "widgets.html"
    widgets.write_text("<!DOCTYPE html><html><head><meta charset='utf-8'><title>widgets"
                       "</title></head><body>"
                       + "".join(f"<div>{part}</div>" for part in (
                           describe_error(err), flags_html(failed.flags + [HOSTILE]),
                           run_html(failed), run_html(ok),
                           comparison_html(Comparison(ok, ok))))
                       + "</body></html>", encoding="utf-8")
    error_line = f"ValueError: {HOSTILE}"
    with sync_playwright() as pw:
        notice = f"Run failed (rank 1: {error_line}"
        check_page(pw, report, NAME, [NAME, error_line, HOSTILE, notice], bokeh=True)
        check_page(pw, tmp_path / "view-history.html", "torch-nbtools findings",
                   [NAME, error_line, notice], bokeh=True)
        check_page(pw, tmp_path / "view-traces.html", "torch-nbtools findings",
                   [f"{NAME}.json: not read"], bokeh=True)
        check_page(pw, figure, "torch-nbtools", [notice], bokeh=True)
        check_page(pw, widgets, "widgets", [error_line, HOSTILE, NAME], bokeh=False)
        # the timeline's own text: a tooltip on the hostile box, the search result
        with open_page(pw, timeline, console_errors=False) as (page, errors):
            page.wait_for_function("() => window.Bokeh && Bokeh.index && "
                                   "[...Bokeh.index.all_views()].some(v => v.frame)",
                                   timeout=30_000)
            _hover_name(page, HOSTILE)
            page.get_by_text(HOSTILE, exact=True).first.wait_for(state="visible",
                                                                 timeout=10_000)
            box = page.get_by_placeholder("search event names")
            box.fill("<svg onload=window.__pwned=2>")      # typed text is echoed too
            box.press("Enter")
            page.get_by_text(f"{HOSTILE} (", exact=False).first.wait_for(
                state="visible", timeout=10_000)
            got = page.evaluate(INSPECT)
            page.screenshot(path=str(ARTIFACTS / "escaping-tooltip-search.png"))
            assert got["pwned"] is None and got["injected"] == [] and \
                got["title"] == "torch-nbtools", got
            assert not errors, errors


def test_the_notice_escapes_what_the_old_one_ran(runs):
    """The timeline's "Run failed (...)" notice is HTML (a Bokeh Div): the error in it is
    escaped there, once."""
    from nbtools.ui.timeline.figure import notice
    _, failed, _ = runs
    text = notice(failed)
    assert html.escape(HOSTILE) in text and HOSTILE not in text
