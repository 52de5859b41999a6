"""Export and back: Kineto files per rank (load_traces and HTA read them), one Perfetto trace."""
from __future__ import annotations

import gzip
import json
import logging
import re

import pandas as pd
import pytest

from nbtools.schema import tables
from nbtools.schema.tables import lane_label
from nbtools.results import trace_export
from nbtools.results.load import load_traces
from support.paths import FIXTURES

HTA = FIXTURES / "hta"
FIXTURE = FIXTURES / "trace_diff_window_rank-1.json.gz"
TWO_RANKS = [HTA / "timeline_analysis_sampled_rank-0.json.gz",
             HTA / "trace_filter_sampled_rank-1.json.gz"]


def canonical(events: pd.DataFrame) -> pd.DataFrame:
    df = events.copy()
    for col in ("lane", "category", "name"):
        df[col] = df[col].astype(str)
    return df.sort_values(["rank", "ts_ns", "lane", "name", "dur_ns"]).reset_index(drop=True)


@pytest.mark.parametrize("source", [
    [FIXTURE], TWO_RANKS, [HTA / "cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"],
    [HTA / "nccl_parser_config_nccl_data.json.gz"]], ids=["graphs", "two-ranks", "cpu", "float-ts"])
def test_kineto_round_trip(tmp_path, source):
    assert all(p.exists() for p in source), f"missing {source} (tests/fixtures is part of the repository)"
    run = load_traces(source)
    paths = trace_export.write_kineto(run, tmp_path)
    assert [p.name for p in paths] == [f"rank-{r}.pt.trace.json.gz"
                                       for r in sorted(run.events["rank"].unique())]
    back = load_traces(tmp_path)
    pd.testing.assert_frame_equal(canonical(back.events), canonical(run.events))
    pd.testing.assert_frame_equal(back.steps, run.steps)


def test_kineto_files_have_what_hta_reads(tmp_path):
    run = load_traces(FIXTURE)
    path, = trace_export.write_kineto(run, tmp_path, compress=False)
    text = path.read_text()
    assert re.search(r'"rank":\s+(\d+)', text).group(1) == "1"   # HTA's own rank regex
    doc = json.loads(text)
    assert doc["distributedInfo"] == {"rank": 1, "world_size": 2}
    ev = doc["traceEvents"]
    cats = {e["cat"] for e in ev}
    assert {"kernel", "cuda_runtime", "cpu_op", "gpu_memcpy", "user_annotation"} <= cats
    kernel = next(e for e in ev if e["cat"] == "kernel")
    assert {"device", "stream", "correlation"} <= set(kernel["args"])
    assert all("stream" not in e.get("args", {}) for e in ev if e["cat"] == "gpu_user_annotation")
    assert any(e["name"].startswith("ProfilerStep#") for e in ev)


@pytest.mark.filterwarnings("ignore")   # HTA 0.5 on pandas 3: deprecation noise
def test_hta_opens_the_export_and_agrees(tmp_path):
    import hta.trace_analysis as hta   # a test dependency (pyproject [test]), not a runtime one
    logging.getLogger("hta").setLevel(logging.ERROR)
    run = load_traces(FIXTURE)
    trace_export.write_kineto(run, tmp_path / "ours")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / FIXTURE.name).write_bytes(FIXTURE.read_bytes())
    ours, theirs = (hta.TraceAnalysis(trace_dir=str(tmp_path / d)) for d in ("ours", "theirs"))
    assert ours.t.get_ranks() == theirs.t.get_ranks() == [1]
    a = ours.get_comm_comp_overlap(visualize=False)["comp_comm_overlap_pctg"].tolist()
    b = theirs.get_comm_comp_overlap(visualize=False)["comp_comm_overlap_pctg"].tolist()
    assert a == b


def test_perfetto_has_a_process_per_rank_and_a_compile_track(tmp_path):
    run = load_traces(TWO_RANKS)
    t0 = int(run.events["ts_ns"].min())
    run.compile_events = tables.from_columns({
        "rank": [0, 1], "kind": ["compile", "recompile"], "name": ["forward", "forward"],
        "frame": ["m.py:3", "m.py:3"], "reason": ["", "size mismatch"],
        "compile_id": ["0/0", "0/1"], "ts_ns": [t0, t0 + 5000], "dur_ns": [2_000_000, 0],
        "step": [-1, 0], "graphs": [1, 1], "ops": [10, 10], "guards": [3, 3],
        "cache": ["miss", ""]}, tables.COMPILE_COLUMNS)
    path = trace_export.write_perfetto(run, tmp_path / "run.json.gz")
    doc = json.loads(gzip.open(path).read())
    ev = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("name") == "process_name"}
    assert procs == {0: "rank 0", 1: "rank 1"}
    threads = {(e["pid"], e["args"]["name"]): e["tid"]
               for e in ev if e.get("name") == "thread_name"}
    lanes = run.events.groupby("rank", observed=True)["lane"].unique()
    for r, names in lanes.items():      # named as the notebook's rows: "r0 CPU thread 30692"
        assert {(r, lane_label(r, n)) for n in names} | {(r, "compile"), (r, "steps")} == \
            {k for k in threads if k[0] == r}
    slices = [e for e in ev if e.get("ph") == "X"]
    compile_ = [e for e in ev if e.get("ph") in "Xi" and e.get("name", "").startswith(
        ("compile", "recompile"))]
    assert len(slices) == len(run.events) + len(run.steps) + 1   # one compile has a duration
    assert [(e["pid"], e["tid"]) for e in compile_] == [(0, threads[(0, "compile")]),
                                                         (1, threads[(1, "compile")])]
    assert compile_[1]["args"]["reason"] == "size mismatch" and compile_[1]["ph"] == "i"
    # ns survive: ts is µs from one base for every rank
    base = doc["otherData"]["nbtools_base_time_ns"]
    first = min(e["ts"] for e in slices if e["pid"] == 0)
    assert round(first * 1000) + base == int(run.events.loc[run.events["rank"] == 0, "ts_ns"].min())


def test_perfetto_names_threads_as_the_notebook_and_carries_the_tooltips_details(tmp_path):
    """The slices' args hold what the notebook's tooltip shows (shapes, bytes, stack; a
    collective's group, or that its trace did not record one) and each thread is named as
    the timeline's row."""
    from nbtools.trace.details import DETAIL_COLUMNS
    from nbtools.ui.timeline import Timeline
    from support.runs import synthetic_run
    run = synthetic_run(events_per_rank=200, seed=3)
    ev = run.events
    op = ev[(ev["rank"] == 0) & (ev["category"] == "cpu_op")].iloc[0]
    comm = ev[(ev["rank"] == 1) & (ev["category"] == "communication")].iloc[0]
    run.event_details = tables.from_columns(dict(
        rank=[0, 1], ts_ns=[op["ts_ns"], comm["ts_ns"]], name=[str(op["name"]), str(comm["name"])],
        detail=["inputs: f32[64, 32] · 8 KB in · stack: model.py:12 forward ← train.py:40 step",
                "inputs: f32[4, 256] · 4 KB in"]), DETAIL_COLUMNS)
    doc = json.loads(trace_export.write_perfetto(run, tmp_path / "run.json").read_text())
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
               if e.get("name") == "thread_name"}
    rows = set(Timeline(run, width=800, live=False).rows_source.data["row"])
    named = {n for n in threads.values() if n not in ("steps", "compile")}
    assert named == {r for r in rows if not r.startswith("·")}, (named, rows)
    assert "r0 CPU thread 1001" in named and not any(n.startswith("cpu:") for n in named)
    base = doc["otherData"]["nbtools_base_time_ns"]

    def slice_at(rank, ts, name):
        return next(e for e in doc["traceEvents"] if e.get("ph") == "X" and e["pid"] == rank
                    and e["name"] == name and round(e["ts"] * 1000) + base == int(ts))
    a = slice_at(0, op["ts_ns"], str(op["name"]))["args"]
    assert a["inputs"] == "f32[64, 32]" and a["bytes in"] == "8 KB"
    assert a["stack"] == "model.py:12 forward ← train.py:40 step"
    c = slice_at(1, comm["ts_ns"], str(comm["name"]))["args"]
    assert c["bytes in"] == "4 KB" and c["group, ranks"] == "not recorded in the trace"
    other = ev[(ev["rank"] == 1) & (ev["category"] == "communication")].iloc[1]
    c2 = slice_at(1, other["ts_ns"], str(other["name"]))["args"]
    assert c2["bytes"] == "not recorded in the trace"
