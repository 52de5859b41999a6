"""The machine's signals while a run runs (issue 45, line 3): the engines' live messages
merged per rank on the client (lab/live_signals.py) and the panel's strip drawn from them
(widgets/panel_signals.py), a stalled and an idle rank marked. Fast: no lab (the strip in a
real run: tests/lab/test_signals_lab.py and tests/ui/browser/test_browser_panel_signals.py)."""
from __future__ import annotations

from nbtools.lab.live_signals import LiveSignals


def _msg(ts, v, sent, run_id="a"):
    return dict(run_id=run_id, ts_ns=ts, values=dict(cpu_pct=v), sent_ns=sent)


def test_live_messages_merge_without_repeats_and_a_silent_rank_ages():
    live = LiveSignals([0, 1], "a")
    assert live.update({0: _msg([1, 2, 3], [10.0, 20.0, 30.0], 100), 1: None}, now=10.0)
    # the next message repeats 2 and 3 (its window overlaps); an old run's is ignored
    assert live.update({0: _msg([2, 3, 4], [20.0, 30.0, 40.0], 200),
                        1: _msg([9], [1.0], 300, run_id="old")}, now=11.0)
    assert live.series(0, "cpu_pct") == ([1, 2, 3, 4], [10.0, 20.0, 30.0, 40.0])
    assert not live.update({0: _msg([2, 3, 4], [20.0, 30.0, 40.0], 200)}, now=12.0)
    assert live.age_s(0, now=14.0) == 3.0 and live.age_s(1) is None
    assert live.latest(0) == {"cpu_pct": 40.0}


def test_the_strip_marks_a_stalled_rank_and_an_idle_one():
    from nbtools.widgets.panel_signals import SignalStrip, render
    live = LiveSignals([0, 1, 2], "a")
    sec = 1_000_000_000
    live.update({0: _msg([i * sec // 10 for i in range(50)], [95.0] * 50, 1),
                 1: _msg([i * sec // 10 for i in range(50)], [95.0] * 10 + [1.0] * 40, 1),
                 2: _msg([0, sec], [90.0, 90.0], 1)}, now=100.0)
    live.arrived[2] = 90.0                              # rank 2's messages stopped 10 s ago
    html = render(live, now=100.0)
    assert "no sample for 10 s: stalled?" in html and "idle for 4 s" in html
    assert html.count("class='nbtools-signal-row'") == 3 and "process CPU 95 %" in html
    live.finished = True
    assert "stalled" not in render(live, now=100.0)
    strip = SignalStrip()
    strip.show(live)
    assert "run done" in strip.widget.value and strip.draws == 1
