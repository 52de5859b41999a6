"""export_html: one self-contained, offline, scrubbed HTML file."""
from __future__ import annotations

import re

import pytest

from nbtools.config.step_config import StepConfig
from nbtools.report.html import export_html, scrub
from nbtools.report.page import unpacked
from support.runs import million_run, synthetic_run

NOTES = """# What autocast did

Recompiled once per rank (see the table). <script>alert("notes")</script>

Logs in /home/alice/runs/today and /root/cache.
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    a = synthetic_run(seed=1, events_per_rank=8_000)   # sub-pixel kernels: LOD merges
    b = synthetic_run(seed=2, step_ns=2_000_000,
                      config=StepConfig(scenario="tp-mlp-infer", compile="reduce-overhead",
                                        autocast="bf16"))
    b.errors = {1: "Traceback\n  File \"/home/alice/proj/x.py\", line 3\n"
                   "RuntimeError: engine {'key': 'a1b2c3d4-FAKE-CONNECTION-KEY-e5f6'}"}
    path = export_html(tmp_path_factory.mktemp("r") / "sub" / "findings.html",
                       (r for r in (a, b)), notes=NOTES, comparisons=[(a, b)])
    # the page as a reader of the file sees it: BokehJS and the figures' JSON unpacked
    # (report/page.py), so what the figures carry is checked as well as the page's text
    return a, b, path, unpacked(path.read_text(encoding="utf-8"))


def test_self_contained_with_bokehjs_once(report):
    *_, html = report
    assert not re.search(r"<script[^>]*\bsrc\s*=", html, re.I)
    assert not re.search(r"<link[^>]*\bhref\s*=\s*['\"]?(https?:)?//", html, re.I)
    assert not re.search(r"@import\s+url\(\s*['\"]?(https?:)?//", html, re.I)
    assert "cdn.bokeh.org" not in html
    # BokehJS inlined exactly once for all figures (two timelines + a comparison), packed
    # with them: one blob per bundle and one document for every figure
    assert html.count("root.Bokeh = bokeh") == 1          # the tail of bokeh.min.js
    assert len(re.findall(r'"name":"Figure"', html)) >= 5
    assert len(re.findall(r'<script type="application/json" id="nbtools-docs"', html)) == 1
    packed = report[2].read_text(encoding="utf-8")
    assert "root.Bokeh" not in packed and '"name":"Figure"' not in packed
    assert len(re.findall(r'<script type="application/gzip-base85"', packed)) >= 4


def test_holds_every_run_and_the_sections(report):
    a, b, path, html = report
    assert path.name == "findings.html" and path.exists()
    for run in (a, b):
        assert f"#{run.run_id}" in html
    for heading in ("Environment", "Runs", "Timeline", "Compile events", "A/B comparisons"):
        assert heading in html
    assert "2.11.0+cu130" in html and "2 × NVIDIA H200" in html and "gpu-node-1" in html
    assert "tensor &#x27;x&#x27; size mismatch" in html           # recompile reason
    assert "divergent: only rank(s) 1" in html                       # limit_hit on rank 1 only
    assert "<b>autocast</b> off → bf16" in html                      # A/B config diff
    assert "merged into" in html                                     # what LOD merged, said


def test_config_rows_that_differ_are_highlighted(report):
    *_, html = report
    row = re.search(r"<tr( class='diff')?><th>autocast</th>", html)
    assert row and row.group(1)
    row = re.search(r"<tr( class='diff')?><th>backend</th>", html)
    assert row and not row.group(1)


def test_notes_are_markdown_with_raw_html_escaped(report):
    *_, html = report
    assert "<h1>What autocast did</h1>" in html
    assert "&lt;script&gt;alert(&quot;notes&quot;)&lt;/script&gt;" in html
    assert '<script>alert("notes")' not in html
    assert "<script>alert('evt')" not in html                        # an event's name


def test_nothing_secret_leaks(report):
    *_, html = report
    for secret in ("a1b2c3d4-FAKE-CONNECTION-KEY-e5f6", "FAKE-CONNECTION", "hunter2", "ipp_key",
                   "SECRET_TOKEN", '"username"', "/home/", "/root", "alice/"):
        # quoted: the inlined BokehJS tables bundle (the region table) holds jQuery's
        # xhr code, "t.username", which is no one's name
        assert secret not in html, secret
    assert "~/proj/model.py:31" in html and "~/runs/today" in html


def test_scrub_and_inputs():
    assert scrub("/home/bob/a.py:3 and /root/x") == "~/a.py:3 and ~/x"
    assert scrub("/rootfs/x") == "/rootfs/x"
    # one rule with the trace reader (common.privacy): what each old copy got wrong
    assert scrub("/home/bob:3 in f") == "~:3 in f"          # both ate ":3" with the name
    assert scrub("C:\\Users\\bob\\m.py") == "~\\m.py"     # neither knew Windows homes
    assert scrub("saved in /root.") == "saved in ~."        # the report's missed /root.
    assert scrub('"/home/al"') == '"~"'                    # the trace's took the quote
    assert "<redacted>" in scrub('"key": "0123456789abcdef"')
    with pytest.raises(TypeError, match="needs Runs"):
        export_html("/tmp/never.html", ["not a run"])


def test_single_run_without_events_or_bokeh_roots(tmp_path):
    from nbtools.results.run import Run
    html = export_html(tmp_path / "empty.html", Run(config=None), notes="*n*").read_text()
    assert "<em>n</em>" in html and "No compile events" in html and "<script" not in html


def test_a_million_events_export_under_25_mb(tmp_path):
    run = million_run()
    path = export_html(tmp_path / "big.html", [run])
    size = path.stat().st_size
    assert size < 25e6, f"{size / 1e6:.1f} MB"
    html = path.read_text(encoding="utf-8")
    assert f"{len(run.events):,} events drawn as" in html and "merged into" in html
