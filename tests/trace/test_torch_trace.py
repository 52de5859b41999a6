"""torch_trace=True from the command line on 2 CPU ranks: every rank's TORCH_TRACE log lands
in the run's history folder, tlparse reads them, its report opens in Chromium, and the
exported report links to it. The sweep also checks that `--parallel none` means none."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from support.browser import launch
from nbtools.results.history import History
from nbtools.ui.html import summary_html
from support.paths import ROOT

pytestmark = pytest.mark.slow   # labs with TORCH_TRACE on, tlparse, Chromium



@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """Two runs on one lab: batch 2 compiles, batch 4 recompiles (cache=continue keeps the
    compiled code, and the new batch size fails its guards)."""
    tmp = tmp_path_factory.mktemp("torch-trace")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    cmd = [sys.executable, "-m", "nbtools", "run", "--scenario", "tp-mlp-infer",
           "--compile", "default", "--backend", "aot_eager", "--torch-trace", "true",
           "--parallel", "none", "--cache", "continue", "--batch", "2,4",
           "--warmup", "1", "--steps", "1", "--profiled", "0", "--quiet",
           "--history", "runs", "--html", "report.html"]
    r = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return tmp, History.load(tmp / "runs"), r.stdout


def test_parallel_none_means_none(traced):
    tmp, h, out = traced
    assert len(h) == 2
    for run in h:
        meta = json.loads((run.folder / "run.json").read_text())
        assert meta["config"]["parallel"] == "none", meta["config"]
        assert run.ok
    assert "parallel=none" in out


def test_each_rank_writes_its_log_into_the_run_folder(traced):
    tmp, h, _ = traced
    first, second = h.runs
    ce = second.compile_events
    assert sorted(ce.loc[ce["kind"] == "recompile", "rank"].unique()) == [0, 1]
    for run in h:
        files = run.torch_trace
        assert sorted({p.parent.name for p in files}) == ["rank0", "rank1"]
        for p in files:
            assert p.is_relative_to(run.folder / "torch_trace")
            assert re.search(r"rank_\d", p.name) and p.stat().st_size > 0
            # structured trace lines: a glog prefix, then one JSON object
            head = p.read_text().splitlines()[0]
            json.loads(head[head.index("{"):])
    text = "".join(p.read_text() for p in second.torch_trace)
    assert "recompile" in text        # the guard failure that made batch 4 recompile
    assert not first.flags or not any("torch_trace" in f for f in first.flags)


def test_tlparse_report_opens_in_chromium_from_the_exported_report(traced):
    from playwright.sync_api import sync_playwright
    tmp, h, _ = traced
    html = (tmp / "report.html").read_text()
    hrefs = re.findall(r"href='([^']*torch_trace/tlparse/index\.html)'", html)
    assert len(hrefs) == 2, "the report links each run's tlparse report"
    recompiled = h.runs[1]
    assert (tmp / hrefs[1]).resolve() == (recompiled.folder / "torch_trace/tlparse/index.html").resolve()
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page()
        page.goto((tmp / hrefs[1]).resolve().as_uri())
        body = page.inner_text("body")
        assert "Multi-Rank TLParse Report" in body and "2 rank(s)" in body
        for rank in (0, 1):
            page.goto((tmp / hrefs[1]).resolve().as_uri())
            page.click(f"text=Rank {rank}")
            page.wait_for_load_state()
            assert "Stack trie" in page.inner_text("body")
            # frame 0's second compile: the recompile, as tlparse names it
            assert page.locator("a", has_text="[0/1]").count() >= 1
        browser.close()


def test_panel_links_the_report(traced, monkeypatch):
    tmp, h, _ = traced
    monkeypatch.chdir(tmp)       # the notebook's folder: JupyterLab resolves links from there
    html = summary_html(h.runs[0])
    assert f"href='{os.path.relpath(h.runs[0].folder / 'torch_trace/tlparse/index.html', tmp)}'" in html


def test_logs_of_a_run_kept_in_memory_follow_it_when_saved(traced, tmp_path):
    """A lab without a history folder: run.torch_trace writes the logs to a temporary folder;
    saving the run later takes them along."""
    from nbtools.results.run import Run
    tmp, h, _ = traced
    src = h.runs[1]
    run = Run(config=src.config, run_id="cafe0001",
              torch_trace_logs={int(p.parent.name[4:]): {p.name: p.read_bytes()}
                                for p in src.torch_trace})
    first = run.torch_trace
    assert [p.name for p in first] == [p.name for p in src.torch_trace]
    run.save(tmp_path / "later")
    moved = run.torch_trace
    assert [p.name for p in moved] == [p.name for p in first]
    assert all(p.is_relative_to(tmp_path / "later") for p in moved)
    assert [p.read_bytes() for p in moved] == [p.read_bytes() for p in src.torch_trace]
