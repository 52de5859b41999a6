"""A/B in rounds on a real 2-rank gloo lab (lab.ab): rounds of A B B A, every run in the
history, a failed round kept and reported, Ctrl-C, stop and errors part-way returning the
finished rounds, bad input refused before anything runs, and the same verdict on every
surface (the Comparison, a notebook cell, the panel's Compare, the exported report, the
CLI). The statistics themselves: tests/analysis/test_verdict.py."""
from __future__ import annotations

import html
import re

import numpy as np
import pytest

from nbtools import ConfigError, StepConfig
from nbtools.ui.summary_view import BAD, GOOD

pytestmark = pytest.mark.slow

LAB = "shared"     # the worker's lab (tests/conftest.py): history counted from here

RUN = dict(scenario="ddp-train", warmup=1, steps=5, profiled=1)
A, B = StepConfig(batch=2, **RUN), StepConfig(batch=16, **RUN)




@pytest.fixture(scope="module")
def ab(lab):
    n = len(lab.history)
    cmp = lab.ab(A, B, rounds=3)
    assert len(lab.history) == n + 12      # every round's four runs kept
    return cmp


def test_rounds_run_abba_and_the_verdict_has_every_field(lab, ab):
    runs = list(lab.history)[-12:]
    assert [r.config.batch for r in runs] == [2, 16, 16, 2] * 3
    assert [r.config.batch for r in ab.runs_a] == [2] * 6
    assert [r.config.batch for r in ab.runs_b] == [16] * 6
    v = ab.verdict
    assert v.metric == "step_ms" and v.rounds == 3 and ab.rounds == 3
    assert v.low <= v.ratio <= v.high
    assert v.resolved == (v.low > 1 or v.high < 1)
    a = np.array([r.summary["step_ms"].max() for r in ab.runs_a])
    b = np.array([r.summary["step_ms"].max() for r in ab.runs_b])
    gm = lambda x: float(np.exp(np.log(x).mean()))   # noqa: E731
    assert v.ratio == pytest.approx(gm(b) / gm(a))   # B's geometric mean over A's
    t = ab.table.set_index("metric")
    # the table's a, b and ratio agree: ratio = b / a, and it is the verdict's
    assert t.at["step_ms", "a"] == pytest.approx(gm(a)) and t.at["step_ms", "b"] == pytest.approx(gm(b))
    assert t.at["step_ms", "ratio"] == pytest.approx(t.at["step_ms", "b"] / t.at["step_ms", "a"])
    assert t.at["step_ms", "ratio"] == pytest.approx(v.ratio) and t.at["step_ms", "low"] == v.low
    for r in ab.table.to_dict("records"):
        if np.isfinite(r["ratio"]):
            assert r["ratio"] == pytest.approx(r["b"] / r["a"]), r
    assert "3 rounds" in v.text and ("no difference resolved" in v.text) != v.resolved
    # the runs shown (table, timeline) are each side's median run
    assert ab.a.summary["step_ms"].max() == sorted(a)[2]


def _coloured(page: str) -> bool:
    return f"color:{GOOD}" in page or f"color:{BAD}" in page


def test_every_surface_shows_the_same_verdict(lab, ab, tmp_path, capsys):
    from nbtools import export_html
    from nbtools import Comparison
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
    assert "3 rounds of A B B A" in page

    # the CLI's `run --rounds`: the runs in their A B B A order give the same verdict
    order = [r for k in range(3) for r in (ab.runs_a[2 * k], ab.runs_b[2 * k],
                                           ab.runs_b[2 * k + 1], ab.runs_a[2 * k + 1])]
    assert Comparison.from_runs(order).verdict == ab.verdict

    # the panel's Compare with rounds: the picked runs' configs again in ABBA rounds
    panel = Panel(lab, A, export_path=tmp_path / "p.html")
    panel.compare_a.value, panel.compare_b.value = ab.runs_a[0].run_id, ab.runs_b[0].run_id
    panel.compare_rounds.value = 2
    n = len(lab.history)
    cmp = panel.compare()
    assert cmp is not None and len(lab.history) == n + 8 and cmp.rounds == 2
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
    assert len(lab.history) == n + 8 and not any(r.ok for r in cmp.runs_b)
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
    # the edges a person hits: each a ConfigError naming what to pass, before any run
    with pytest.raises(ConfigError, match=r"from 1 to 100"):
        lab.ab(A, B, rounds=10**9)
    with pytest.raises(ConfigError, match="whole number"):
        lab.ab(A, B, rounds=2.5)
    with pytest.raises(ConfigError, match="one metric's name"):
        lab.ab(A, B, metric=["step_ms"])
    with pytest.raises(ConfigError, match="timeout"):
        lab.ab(A, B, timeout=-1)
    with pytest.raises(ConfigError, match="a=None: give a Run"):
        lab.compare(None, lab.history[-1] if len(lab.history) else "x")
    assert len(lab.history) == n


def test_numpy_rounds_and_a_stop_return_the_finished_rounds(lab):
    import threading
    stop, events = threading.Event(), []

    def on_run(e):
        events.append((e["phase"], e["round"], e["side"], e["index"], e["of"]))
        if e["phase"] == "done" and e["round"] == 1 and e["index"] == 4:
            stop.set()                    # the first round finished: stop before round 2

    n = len(lab.history)
    cmp = lab.ab(A, B, rounds=np.int64(3), on_run=on_run, stop=stop)
    assert len(lab.history) == n + 4 and cmp.rounds == 1
    assert events[0] == ("start", 1, "A", 1, 12) and events[-1] == ("done", 1, "A", 4, 12)
    assert [e[2] for e in events if e[0] == "done"] == ["A", "B", "B", "A"]
    assert "; stopped after 1 of 3 rounds" in cmp.verdict.text
    assert "stopped after 1 of 3 rounds" in cmp.verdict.caveats


def test_ctrl_c_part_way_returns_the_finished_rounds_and_the_lab_goes_on(lab):
    def on_run(e):
        # Ctrl-C as the main thread sees it, right after round 2's first run: raised here,
        # in the loop, it is what a SIGINT becomes; a timer's SIGINT lands wherever a loaded
        # box lets it (dispatch-time Ctrl-C: test_ctrl_c_while_the_run_is_sent_...)
        if e["phase"] == "done" and e["round"] == 2:
            raise KeyboardInterrupt

    n = len(lab.history)
    cmp = lab.ab(A, B, rounds=3, on_run=on_run)
    assert cmp.rounds == 1 and "interrupted (Ctrl-C) after 1 of 3 rounds" in cmp.verdict.text
    assert len(lab.history) == n + 5 and len(cmp.runs_a) == len(cmp.runs_b) == 2
    # goes on: the next run completes (a hung lab is the timeout's failure, on any host)
    assert lab.run(A).ok


def test_different_workloads_and_busy_hosts_are_said_in_the_verdict(lab, ab):
    from nbtools import Comparison
    other = StepConfig(scenario="tp-mlp-infer", warmup=1, steps=3, profiled=0)
    cmp = lab.ab(A, other, rounds=1)
    assert "A and B are different workloads (ddp-train and tp-mlp-infer)" in cmp.verdict.text
    # a host-busy flag on any run of the rounds is said with the count of runs
    import copy
    runs = [copy.copy(r) for r in ab.runs_b]
    runs[0].flags = list(runs[0].flags) + ["host busy: load 3.1 per core on box while rank(s) "
                                           "0, 1 timed steps"]
    v = Comparison.from_rounds(ab.runs_a, runs).verdict
    assert "runs on a busy host (see their flags)" in v.text and v.caveats


def test_ctrl_c_while_the_run_is_sent_keeps_it_and_the_next_run_works(lab, monkeypatch):
    # the interrupt lands between sending the run to rank 0 and to rank 1: rank 0 holds it
    # (and waits in a collective for rank 1), rank 1 never got it
    from nbtools.lab.lab import Lab
    real, sent = Lab._send, []

    def send(self, *a):
        if sent:
            raise KeyboardInterrupt
        sent.append(1)
        return real(self, *a)

    monkeypatch.setattr(Lab, "_send", send)
    n = len(lab.history)
    with pytest.raises(KeyboardInterrupt, match="interrupted"):
        lab.run(A)
    monkeypatch.setattr(Lab, "_send", real)
    kept = lab.history[-1]
    assert len(lab.history) == n + 1 and kept.status == "interrupted"
    assert "before the run reached this rank" in kept.errors[1]
    assert lab.run(A).ok


def test_twenty_real_identical_config_ab_s_keep_the_promise(lab):
    """20 A/As of one config on the real lab (2 CPU ranks sharing 2 cores, which is as noisy
    as it gets): a 95 % verdict may call about 1 in 20 resolved; more than 4 has a chance
    below 0.3 % when the promise holds. Pooled, the 40 rounds' log ratios show no side
    favoured (an order or state bias: the old A B / B A rounds read B 1-2 % slower on a
    GPU, and a 9-round CPU A/A said 1.84x)."""
    from scipy import stats
    cfg = StepConfig(scenario="tp-mlp-infer", warmup=1, steps=4, profiled=0)
    verdicts, logs = [], []
    for _ in range(20):
        cmp = lab.ab(cfg, cfg, rounds=2, on_run=lambda e: None)
        verdicts.append(cmp.verdict)
        va, vb = cmp.round_values("step_ms")
        logs += [np.mean(np.log(b)) - np.mean(np.log(a)) for a, b in zip(va, vb)]
    resolved = [v.text for v in verdicts if v.resolved]
    assert len(resolved) <= 4, resolved
    assert len(logs) == 40 and stats.ttest_1samp(logs, 0.0).pvalue > 0.001, \
        (np.exp(np.mean(logs)), [v.text for v in verdicts])


def test_rounds_auto_stops_when_resolved_and_says_after_how_many(lab):
    n = len(lab.history)
    big = StepConfig(batch=64, **RUN)
    cmp = lab.ab(A, big, rounds="auto", max_rounds=5, on_run=lambda e: None)
    v = cmp.verdict
    assert len(lab.history) == n + 4 * cmp.rounds and 3 <= cmp.rounds <= 5
    assert "at each of up to 3 looks" in v.text and f"{cmp.rounds} rounds" in v.text
    if cmp.rounds < 5:                 # it stopped early: only because it was resolved
        assert v.resolved, v.text
    with pytest.raises(ConfigError, match="max_rounds=2"):
        lab.ab(A, B, rounds="auto", max_rounds=2)
    with pytest.raises(ConfigError, match="width="):
        lab.ab(A, B, rounds="auto", width=-1)
