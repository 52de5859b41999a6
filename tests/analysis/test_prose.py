"""Sentences and shown tables of the claim notebooks never say "nan" or "None": a run that
failed or timed out (notebook 03 after a run timed out printed "nan recompiles in 43 steps
(hit the recompile limit), ... (+nan % vs fixed length)") says it was not measured."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from nbtools import tutorial as X


def _table():
    t = pd.DataFrame(dict(dynamic=["static", "auto", "mark"], seq_schedule="varying",
                          recompiles=[7.0, np.nan, 1.0], n_limit_hit=[1.0, np.nan, 0.0],
                          tokens_per_s=[1234.5, np.nan, 2000.0],
                          steady_tokens_per_s=[3000.0, np.nan, 3100.0],
                          status=["ok", "failed", "ok"]))
    t["vs_fixed_pct"] = X.pct_vs(t.tokens_per_s, 1500.0)
    t["steady_vs_fixed_pct"] = X.pct_vs(t.steady_tokens_per_s, np.nan)   # baseline failed
    return t


def test_policy_lines_say_not_measured_instead_of_nan():
    lines = X.policy_lines(_table(), steps=43)
    assert lines[0] == ("measured here: dynamic=static varying: 7 recompiles in 43 steps (hit the "
                        "recompile limit), 1,234 tokens/s over the epoch (-18 % vs fixed length), "
                        "3,000 once compiled (vs fixed length: not measured)")
    assert lines[1] == ("measured here: dynamic=auto varying: not measured: the run failed (its "
                        "error is above); no recompile count or throughput")
    assert "hit the recompile limit" not in lines[2] and "+33 % vs fixed length" in lines[2]
    for line in lines:
        assert not any(w in line.lower() for w in ("nan", "none")), line


def test_shown_table_has_no_nan_cell():
    html = X.shown(_table()).to_html()
    assert "not measured" in html
    cells = [c.strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", html, flags=re.S)]
    assert len(cells) == 3 * 9 and "not measured" in cells and "7" in cells
    assert not {"nan", "NaN", "None", "<NA>"} & set(cells), cells


def test_numbers_and_sizes_in_sentences_say_not_measured():
    assert X.num(float("nan"), "{:.1f} %") == "not measured" and X.num(None) == "not measured"
    assert X.num(12.345, "{:.1f} %") == "12.3 %"
    assert X.mb(float("nan")) == "not measured on CPU"
    assert X.mb(0.035) == "35.8 KB" and X.mb(1536) == "1.5 GB"
