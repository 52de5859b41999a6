"""Parts inside their whole, on every surface: per rank exposed_comm_ms <= comm_ms and
compute_ms + exposed_comm_ms + idle_ms <= profiled_window_ms (the step shown beside them);
category times count an instant once per lane; the per-rank summary bars total the step
they name; compile seconds are one rank's wall time and the run's is the slowest rank's.
Over every fixture trace, the H200 traces, generated event tables and fresh CPU runs."""
from __future__ import annotations


import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbtools import load_traces
from nbtools.schema import tables
from nbtools.analysis.breakdown import breakdown, rank_table, violations
from nbtools.analysis.compile_counts import wall_s
from nbtools.analysis.metrics import combine
from nbtools.analysis.step_metrics import category_ms
from nbtools.common.units import fmt_number
from nbtools.ui.timeline.data import SUMMARY_STACK, summary_data
from support.paths import FIXTURES, H200

HTA = sorted((FIXTURES / "hta").glob("*.json.gz"))


def _lane_spans(events) -> pd.Series:
    """Per category, the summed spans of the lanes that carry it: an upper bound for that
    category's time when each instant counts once per lane."""
    e = events.assign(end=events["ts_ns"] + events["dur_ns"], cat=events["category"].astype(str),
                      lane=events["lane"].astype(str))
    g = e.groupby(["rank", "lane", "cat"], observed=True)
    return ((g["end"].max() - g["ts_ns"].min()).groupby(level="cat").sum()) / 1e6


def check_surfaces(summary, events, steps):
    """Every invariant on one run's tables; returns the summary's ranks checked."""
    assert violations(summary) == []
    measured = summary.dropna(subset=["compute_ms"])
    assert measured["profiled_window_ms"].notna().all(), "parts without the whole they are of"
    # the run's numbers (mean over ranks, as the registry combines them) keep it too
    run = {m: combine(summary, m) for m in ("compute_ms", "exposed_comm_ms", "idle_ms",
                                           "comm_ms", "profiled_window_ms")}
    if not np.isnan(run["compute_ms"]):
        assert run["exposed_comm_ms"] <= run["comm_ms"] + 1e-9
        assert run["compute_ms"] + run["exposed_comm_ms"] + run["idle_ms"] <= \
            run["profiled_window_ms"] + 1e-9
    # the summary bars: their segments total the step they name, and name it
    ranks = measured["rank"].tolist()
    bars = summary_data(summary, ranks)
    total = sum(bars[f] for f, _, _ in SUMMARY_STACK)
    want = np.nan_to_num(measured.set_index("rank").loc[ranks, "profiled_window_ms"].to_numpy())
    assert np.allclose(total, want, rtol=1e-9, atol=1e-9)
    for text, w in zip(bars["text"], want):
        # the bar names its whole as what it is (the profiled steps' mean window), not
        # "step", which read as step_ms (the measured steps' median) in the table beside
        assert text.startswith(f"profiled step {fmt_number(w)} ms (mean)"), text
    # time per category: once per lane, so never more than the lanes' spans
    per_cat = category_ms(events, steps)
    n = int((steps["phase"] == "profiled").sum()) if len(steps) else 0
    n = n or max(int(events["rank"].nunique()), 1)
    bound = _lane_spans(events) / n
    for cat, ms in per_cat.items():
        assert ms <= bound[cat] + 1e-6, (cat, ms, bound[cat])
    return ranks


@pytest.mark.parametrize("path", HTA, ids=lambda p: p.name.split(".")[0][:40])
def test_parts_fit_on_every_fixture_trace(path):
    run = load_traces(path, rank=0)    # some carry no rank: the invariants do not need it
    assert check_surfaces(run.summary, run.events, run.steps)


@pytest.mark.parametrize("config", ["off", "reduce-overhead"])
def test_parts_fit_on_the_h200_traces(config):
    run = load_traces([H200 / f"tp_{config}_rank0.json.gz", H200 / f"tp_{config}_rank1.json.gz"])
    assert check_surfaces(run.summary, run.events, run.steps) == [0, 1]
    # NCCL kernels make communication on both ranks: the inequality is not vacuous
    assert (run.summary["comm_ms"] > 0).all()


def test_parts_fit_on_the_h200_events_table():
    events = pd.read_parquet(FIXTURES / "h200" / "tp_b256_events.parquet")
    steps = tables.from_columns({c: [] for c in tables.STEP_COLUMNS}, tables.STEP_COLUMNS)
    summary = rank_table(events, steps)
    assert check_surfaces(summary, events, steps) == [0, 1]
    assert (summary["exposed_comm_ms"] > 0).any()


# -- generated event tables ----------------------------------------------------------
CATS = ("compute", "communication", "memcpy", "cpu_op", "runtime")


@st.composite
def event_tables(draw):
    rows = []
    for rank in range(draw(st.integers(1, 2))):
        gpu = draw(st.booleans())
        for step in range(draw(st.integers(1, 3))):
            t0 = 1_000_000 * (step + 1) * 10
            # the step range (ours) on the CPU thread
            length = draw(st.integers(1_000, 900_000))
            rows.append((rank, "cpu:1", "annotation", f"nbtools/step {step}", t0, length, step))
            for _ in range(draw(st.integers(0, 12))):
                lane = draw(st.sampled_from(["cpu:1", "cpu:2"] + (["cuda:0:7", "cuda:0:8"]
                                                                 if gpu else [])))
                cat = draw(st.sampled_from(CATS if lane.startswith("cuda") else
                                           ("cpu_op", "communication", "runtime")))
                ts = t0 + draw(st.integers(-50_000, 1_200_000))
                rows.append((rank, lane, cat, f"{cat}_{len(rows) % 3}", ts,
                             draw(st.integers(0, 400_000)), step))
    df = pd.DataFrame(rows, columns=["rank", "lane", "category", "name", "ts_ns", "dur_ns",
                                     "step"])
    df["correlation"], df["graph"] = -1, False
    return tables.from_columns({c: df[c] for c in tables.EVENT_COLUMNS}, tables.EVENT_COLUMNS)


def _brute_union(intervals) -> int:
    covered = set()
    for s, e in intervals:
        covered.update(range(s, e))
    return len(covered)


@settings(max_examples=60, deadline=None)
@given(event_tables())
def test_parts_fit_on_generated_events(events):
    steps = pd.DataFrame({"rank": [], "step": [], "phase": []})
    summary = rank_table(events, steps)
    assert violations(summary) == []
    bd = breakdown(events, steps)
    assert (bd["exposed_comm_ms"] <= bd["comm_ms"] + 1e-9).all()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["cpu:1", "cuda:0:7"]), st.sampled_from(CATS[:2]),
                          st.integers(0, 300), st.integers(0, 120)), min_size=1, max_size=25))
def test_category_time_counts_each_instant_once_per_lane(spans):
    df = pd.DataFrame(spans, columns=["lane", "category", "ts_ns", "dur_ns"])
    df["rank"], df["name"], df["step"], df["correlation"], df["graph"] = 0, "x", 0, -1, False
    events = tables.from_columns({c: df[c] for c in tables.EVENT_COLUMNS}, tables.EVENT_COLUMNS)
    got = category_ms(events, pd.DataFrame({"phase": []}))
    for cat, g in df.groupby("category"):
        want = sum(_brute_union(zip(h["ts_ns"], h["ts_ns"] + h["dur_ns"]))
                   for _, h in g.groupby("lane"))
        assert got[cat] * 1e6 == pytest.approx(want)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 200)), max_size=12))
def test_compile_seconds_are_wall_time(spans):
    rows = [dict(ts_ns=s, dur_ns=d) for s, d in spans]
    assert wall_s(rows) * 1e9 == pytest.approx(_brute_union((s, s + d) for s, d in spans))
    assert wall_s(pd.DataFrame(rows, columns=["ts_ns", "dur_ns"])) == wall_s(rows)


def test_nested_compile_counts_once_and_ranks_do_not_add_up():
    # a backward compiled inside its forward's frame: 3 s of wall time, not 5
    assert wall_s([dict(ts_ns=0, dur_ns=3 * 10**9), dict(ts_ns=10**9, dur_ns=2 * 10**9)]) == 3.0
    summary = pd.DataFrame({"rank": [0, 1], "compile_s": [79.0, 80.0]})
    assert combine(summary, "compile_s") == 80.0          # the slowest rank, never 159


def test_the_exported_compile_table_gives_the_slowest_ranks_seconds():
    from nbtools.report.html import _compile_table
    from nbtools.results.run import Run
    ce = pd.DataFrame({"rank": [0, 1], "kind": ["compile"] * 2, "name": ["f"] * 2,
                       "frame": ["a.py:1"] * 2, "reason": [""] * 2,
                       "ts_ns": [0, 5 * 10**8], "dur_ns": [79 * 10**9, 80 * 10**9]})
    empty = {c: [] for c in tables.STEP_COLUMNS}
    run = Run(config=None, steps=tables.from_columns(empty, tables.STEP_COLUMNS),
              events=tables.from_columns({c: [] for c in tables.EVENT_COLUMNS},
                                         tables.EVENT_COLUMNS),
              compile_events=ce)
    html = _compile_table(run)
    assert "<td>80</td>" in html and "159" not in html and "slowest rank" in html


# -- fresh CPU runs ------------------------------------------------------------------
# the conftest lab, with what this module needs beside its defaults
LAB = "shared"     # the worker's lab (tests/conftest.py)


@pytest.mark.parametrize("fields", [
    dict(scenario="fsdp2-train", parallel="ddp"),
    dict(scenario="fsdp2-train", parallel="fsdp2", compile="default", backend="aot_eager"),
], ids=["ddp", "fsdp2-compiled"])
def test_parts_fit_on_fresh_cpu_runs_and_the_run_carries_the_machine(lab, fields):
    from nbtools import StepConfig
    from nbtools.analysis import flags as F
    from nbtools.analysis.machine import busy_host
    run = lab.run(StepConfig(warmup=2, steps=4, profiled=3, **fields))
    assert check_surfaces(run.summary, run.events, run.steps) == [0, 1]
    s = run.summary
    assert (s["comm_ms"] > 0).all()                 # gloo collectives: not vacuous
    ce = run.compile_events
    for r in (0, 1):       # compile seconds: this rank's wall time (0 when nothing compiled)
        rows = ce[(ce["rank"] == r) & ce["kind"].isin(["compile", "recompile",
                                                      "backward_compile"])]
        assert s.loc[s["rank"] == r, "compile_s"].item() == pytest.approx(wall_s(rows), abs=1e-6)
    # the machine: host load on every rank, no GPU columns on CPU, the flag iff busy
    assert (s["host_load"] > 0).all() and "sm_clock_mhz" not in s
    for r in (0, 1):
        m = run.ranks[r]["machine"]
        assert m["nvml"] == "" and m["samples"] >= 2          # run.samples holds them
        assert (run.samples["rank"] == r).sum() >= 2
    busy = [f for f in run.flags if F.identify(f) == "host-busy"]
    loaded = bool(busy_host(s).any())
    assert not busy or loaded                       # the flag only when others kept it busy
    if loaded:   # said by this run, or once before in this lab (issue 34: not every run)
        assert busy or "host-busy" in lab.said_once, run.flags
