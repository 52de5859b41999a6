"""Real tokens per second: each rank reports the real and the padded items of every
measured step (engine/runner.py), and analysis.counts.tokens_per_s is a pure function of
the Run (it used to recompute the lengths on the client, importing torch and the engine's
scenarios). Runs saved before that field load and say why they have no tokens/s."""
import pandas as pd
import pytest

from nbtools import StepConfig
from nbtools.schema import tables
from nbtools.analysis.counts import ItemsNotReported, tokens_per_s
from nbtools.lab.sweeps import table
from nbtools.results.history import History
from nbtools.results.run import Run

CFG = StepConfig(scenario="varlen-train", seq_schedule="bucketed", warmup=1, steps=3, profiled=0)


def _run(step_items=True) -> Run:
    """Two ranks, warm-up step 0, measured steps 1-3 of 10, 20 and 30 ms."""
    rows = {k: [] for k in tables.STEP_COLUMNS}
    for rank in (0, 1):
        for step, phase, ms in ((0, "warmup", 500), (1, "measured", 10), (2, "measured", 20),
                                (3, "measured", 30)):
            for k, v in dict(rank=rank, step=step, phase=phase, ts_ns=step * 10**9,
                             dur_ns=ms * 10**6).items():
                rows[k].append(v)
    items = dict(step=[1, 2, 3], real=[100.0, 200.0, 300.0], padded=[200.0, 200.0, 400.0])
    ranks = {r: ({"step_items": items} if step_items else {}) for r in (0, 1)}
    return Run(config=CFG, steps=tables.from_columns(rows, tables.STEP_COLUMNS), ranks=ranks,
               summary=pd.DataFrame({"rank": [0, 1], "step_ms": [20.0, 20.0]}))


def test_tokens_per_s_reads_what_the_ranks_reported():
    t = tokens_per_s(_run()).set_index("rank")
    assert t.loc[0, "tokens_per_s"] == pytest.approx(600 / 0.060)          # epoch view
    assert t.loc[0, "steady_tokens_per_s"] == pytest.approx(200 / 0.020)   # mean / median
    assert t.loc[1, "padding_pct"] == pytest.approx(100 * (1 - 600 / 800))
    assert t.loc[0, "mean_step_ms"] == pytest.approx(20.0)
    row = table([_run()], ["tokens_per_s", "padding_pct"]).iloc[0]
    assert row["tokens_per_s"] == pytest.approx(2 * 600 / 0.060)    # data parallel: ranks add
    assert row["padding_pct"] == pytest.approx(25.0)


def test_a_run_saved_before_step_items_loads_and_says_why(tmp_path):
    h = History(tmp_path)
    h.add(_run(step_items=False))
    old = History.load(tmp_path)[0]
    assert not old.damage
    with pytest.raises(ItemsNotReported, match="did not report its items per step"):
        tokens_per_s(old)
    row = table([old], ["tokens_per_s", "steady_tokens_per_s", "padding_pct"]).iloc[0]
    assert row[["tokens_per_s", "steady_tokens_per_s", "padding_pct"]].isna().all()


def test_the_engine_reports_real_and_padded_items_per_measured_step():
    import torch
    from nbtools.engine import scenarios
    from nbtools.engine.runner import _measured_items
    cfg = CFG.replace(warmup=2, steps=12)
    wl = scenarios.build(cfg, torch.device("cpu"), 0, 1)
    got = _measured_items(wl, cfg)
    assert got["step"] == list(range(2, 14))
    _, batch, seq = scenarios.sizes(cfg, torch.device("cpu"))
    lens = [scenarios.seq_len_at(i, seq, "bucketed", cfg.seed) for i in got["step"]]
    assert got["real"] == [batch * n for n, _ in lens]
    assert got["padded"] == [wl.make_batch(i)[0][0].numel() for i in got["step"]]
    assert any(r < p for r, p in zip(got["real"], got["padded"]))    # bucketed pads
    fixed = CFG.replace(scenario="ddp-train", seq_schedule=None)    # no sequence: no padding
    items = _measured_items(scenarios.build(fixed, torch.device("cpu"), 0, 1), fixed)
    assert items["real"] == items["padded"] and len(set(items["real"])) == 1
