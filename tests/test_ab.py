"""A/B in rounds on a real 2-rank gloo lab (lab.ab): ABBA order, every run in the history, a
failed round kept and reported, bad input refused before anything runs, and the same verdict
on every surface (the Comparison, a notebook cell, the panel's Compare, the exported report,
the CLI). The statistics themselves: tests/test_verdict.py."""
from __future__ import annotations

import html
import re

import pytest

from nbtools import ConfigError, StepConfig
from nbtools.ui.summary_view import BAD, GOOD

pytestmark = pytest.mark.slow

RUN = dict(scenario="ddp-train", warmup=1, steps=5, profiled=1)
A, B = StepConfig(batch=2, **RUN), StepConfig(batch=16, **RUN)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    from nbtools import Lab
    with Lab(n=2, history=tmp_path_factory.mktemp("history"), timeout=240,
             pg_timeout=120) as lab:
        yield lab


@pytest.fixture(scope="module")
def ab(lab):
    n = len(lab.history)
    cmp = lab.ab(A, B, rounds=3)
    assert len(lab.history) == n + 6       # every round's run kept
    return cmp


def test_rounds_run_abba_and_the_verdict_has_every_field(lab, ab):
    runs = list(lab.history)[-6:]
    assert [r.config.batch for r in runs] == [2, 16, 16, 2, 2, 16]
    assert [r.config.batch for r in ab.runs_a] == [2, 2, 2]
    assert [r.config.batch for r in ab.runs_b] == [16, 16, 16]
    v = ab.verdict
    assert v.metric == "step_ms" and v.rounds == 3 and ab.rounds == 3
    assert v.low <= v.ratio <= v.high
    assert v.resolved == (v.low > 1 or v.high < 1)
    a = [r.summary["step_ms"].max() for r in ab.runs_a]
    b = [r.summary["step_ms"].max() for r in ab.runs_b]
    assert v.ratio == pytest.approx(sorted(y / x for x, y in zip(a, b))[1])  # median round
    t = ab.table.set_index("metric")
    assert t.at["step_ms", "a"] == pytest.approx(sorted(a)[1])
    assert t.at["step_ms", "ratio"] == v.ratio and t.at["step_ms", "low"] == v.low
    assert v.text.endswith("3 rounds)") and ("no difference resolved" in v.text) != v.resolved
    # the runs shown (table, timeline) are each side's median run
    assert ab.a.summary["step_ms"].max() == sorted(a)[1]


def _coloured(page: str) -> bool:
    return f"color:{GOOD}" in page or f"color:{BAD}" in page


def test_every_surface_shows_the_same_verdict(lab, ab, tmp_path, capsys):
    from nbtools import export_html
    from nbtools.lab.ab import pair_from_runs
    from nbtools.ui.html import comparison_html
    from nbtools.widgets.panel import Panel

    text = html.escape(ab.verdict.text)
    cell = ab._repr_html_()
    assert text in cell and text in comparison_html(ab)
    table = cell[cell.index("<table"):cell.index("</table>")]
    # a change is coloured only when its verdict is resolved
    row = re.search(r"<th title='[^']*'>step_ms</th>(.*?)</tr>", table).group(1)
    assert _coloured(row) == ab.verdict.resolved, row
    for r in ab.table.to_dict("records"):
        if not r["resolved"]:
            m = re.search(rf"<th title='[^']*'>{r['metric']}</th>(.*?)</tr>", table).group(1)
            assert not _coloured(m), (r["metric"], m)

    page = export_html(tmp_path / "ab.html", [ab.a, ab.b], comparisons=[ab]).read_text("utf-8")
    assert text in page[page.index("<h2>A/B comparisons</h2>"):]
    assert "3 rounds (ABBA)" in page

    # the CLI's `run --rounds`: the runs in their ABBA order give the same verdict
    order = [r for k in range(3) for r in ((ab.runs_a[k], ab.runs_b[k]) if k % 2 == 0
                                           else (ab.runs_b[k], ab.runs_a[k]))]
    assert pair_from_runs(order).verdict == ab.verdict

    # the panel's Compare with rounds: the picked runs' configs again in ABBA rounds
    panel = Panel(lab, A, export_path=tmp_path / "p.html")
    panel.compare_a.value, panel.compare_b.value = ab.runs_a[0].run_id, ab.runs_b[0].run_id
    panel.compare_rounds.value = 2
    n = len(lab.history)
    cmp = panel.compare()
    assert cmp is not None and len(lab.history) == n + 4 and cmp.rounds == 2
    assert html.escape(cmp.verdict.text) in panel.compare_html.value
    assert "2 rounds" in cmp.verdict.text
    # one round: the two runs as they are, steps resampled, no drift covered
    panel.compare_rounds.value = 1
    single = panel.compare()
    assert single.rounds == 1 and "no drift between runs" in single.verdict.text
    assert html.escape(single.verdict.text) in panel.compare_html.value
    out = panel.export()
    assert html.escape(single.verdict.text) in out.read_text("utf-8")


def test_compare_of_two_runs_says_it_covers_no_drift(lab, ab):
    cmp = lab.compare(ab.runs_a[0], ab.runs_b[0])
    v = cmp.verdict
    assert v.rounds == 1 and "no drift between runs" in v.text
    assert v.low <= v.ratio <= v.high
    # each run's step_ms (its slowest rank's median) over the other's: the table's ratio
    t = cmp.table.set_index("metric")
    assert v.ratio == pytest.approx(t.at["step_ms", "ratio"])
    # one value a side (no steps to resample) is never resolved, so never coloured
    assert not t.at["items_per_s", "resolved"]


def test_a_failed_round_is_kept_and_reported(lab):
    def fail_on_rank_1(ctx):
        import torch
        if ctx.rank == 1:
            raise RuntimeError("boom on purpose")
        return torch.ones(2).sum()

    n = len(lab.history)
    cmp = lab.ab(A, (fail_on_rank_1, dict(warmup=0, steps=2, profiled=0)), rounds=2)
    assert len(lab.history) == n + 4 and not any(r.ok for r in cmp.runs_b)
    v = cmp.verdict
    assert not v.resolved and v.failed == 2
    assert v.text.startswith("no verdict on step_ms: no round has a value on both sides")
    assert "2 of 2 rounds dropped" in v.text


def test_bad_input_is_refused_before_anything_runs(lab):
    n = len(lab.history)
    with pytest.raises(ConfigError, match="rounds=0"):
        lab.ab(A, B, rounds=0)
    with pytest.raises(ConfigError, match="metric='speed'"):
        lab.ab(A, B, metric="speed")
    with pytest.raises(ConfigError, match="b: give a StepConfig"):
        lab.ab(A, (1, 2, 3))
    with pytest.raises(ConfigError):
        lab.ab(A, StepConfig(scenario="ddp-train", parallel="tp"))
    assert len(lab.history) == n
