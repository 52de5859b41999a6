"""The timeline's names, search totals, flows, memory lane and Perfetto export, on synthetic
runs (the BokehJS side of search, region table and names: test_browser_timeline.py)."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from support.runs import synthetic_run


def test_names_fit_inside_their_boxes_or_are_cut_or_left_out():
    from nbtools.ui.timeline.interactions import CHAR_PX, fit_labels
    left, right = [0.0, 10.0, 20.0, 30.0], [10.0, 13.0, 20.05, 31.0]
    names = ["aten::mm", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "tiny", ""]
    # 40 ms over 400 px: 10 px per ms
    out = fit_labels(left, right, [0, 1, 2, 3], names, 0.0, 40.0, 400)
    assert out["text"] == ["aten::mm", "ncc…"]          # 100 px: whole; 30 px: cut; else none
    assert out["y"] == [0, 1]
    # a box starting before the window: its name starts at the window's edge
    out = fit_labels([-5.0], [5.0], [0], ["aten::mm"], 0.0, 10.0, 1000)
    assert out["x"] == [0.0] and out["text"] == ["aten::mm"]
    assert (500 - 4) / CHAR_PX > len("aten::mm")


def test_timeline_draws_names_on_first_paint_and_searches_full_totals():
    from nbtools.ui.timeline import Timeline
    from nbtools.ui.timeline.interactions import name_totals
    run = synthetic_run(events_per_rank=400)
    tl = Timeline(run, width=1200)
    lab = tl.labels_source.data
    assert len(lab["text"]) > 10
    # every name drawn is a box's name (or its cut start) and sits on that box's row
    boxes = tl.events_source.data
    full = set(zip(boxes["y"], tl.decode()["name"]))
    for y, t in zip(lab["y"], lab["text"]):
        assert (y, t) in full or any(yy == y and n.startswith(t[:-1]) for yy, n in full), t
    agg = pd.DataFrame(tl.controls.agg_source.data)
    ev = run.events
    for (r, name), g in ev.groupby(["rank", "name"], observed=True):
        row = agg[(agg["rank"] == r) & (agg["name"] == name)]
        assert int(row["count"].iloc[0]) == len(g)
        assert float(row["total"].iloc[0]) == pytest.approx(float(g["dur_ns"].sum()))
    assert len(agg) == len(name_totals(ev)["name"])


def _collective_events(offsets_ns, steps=2, per_step=3):
    """Two or more ranks, each with compute then ``per_step`` all-reduces per step; rank r's
    collectives start offsets_ns[r] later than the scheduled time."""
    from nbtools.schema import tables
    rows = []
    for r, off in enumerate(offsets_ns):
        for s in range(steps):
            for k in range(per_step):
                t = 1_000_000_000 + s * 10_000_000 + k * 2_000_000
                rows.append((r, "cuda:0:7", "compute", "gemm", t, 500_000, s))
                rows.append((r, "cuda:0:13", "communication", "ncclDevKernel_AllReduce",
                             t + 600_000 + off, 800_000 - off // 2, s))
    cols = list(zip(*rows))
    return tables.from_columns(dict(rank=cols[0], lane=cols[1], category=cols[2], name=cols[3],
                                    ts_ns=cols[4], dur_ns=cols[5], step=cols[6],
                                    correlation=list(range(len(rows))),
                                    graph=[False] * len(rows)), tables.EVENT_COLUMNS)


def test_flows_join_each_collective_to_the_last_rank_with_its_wait():
    from nbtools.analysis.collective_flows import collective_flows
    fl = collective_flows(_collective_events([0, 300_000, 100_000]))
    assert len(fl) == 2 * 3 * 2                    # steps x collectives x waiting ranks
    assert set(fl["last_rank"]) == {1}
    assert set(fl["rank"]) == {0, 2}
    assert sorted(set(fl["wait_ns"])) == [200_000, 300_000]
    assert (fl["last_lane"] == "cuda:0:13").all()
    assert collective_flows(_collective_events([0])).empty         # one rank: nothing to join


def test_timeline_flows_are_switchable_and_say_who_waited():
    from nbtools.results.run import Run
    from nbtools.ui.timeline import Timeline
    run = Run(config=None, events=_collective_events([0, 300_000]))
    tl = Timeline(run)
    d = tl.flows_source.data
    assert len(d["x0"]) == 6
    assert "rank 0 waited 300 µs for rank 1" in d["text"][0]
    assert set(d["y0"]) == {tl._lane_y[(0, "cuda:0:13")]}
    assert set(d["y1"]) == {tl._lane_y[(1, "cuda:0:13")]}
    switch = tl.controls.flows
    linked = {v.id for cb in switch.js_property_callbacks.get("change:active", [])
              for v in cb.args.values() if hasattr(v, "id")}
    assert {r.id for r in tl._r_flows} <= linked


def test_light_capture_shows_a_clean_step_strip():
    from nbtools.schema import tables
    from nbtools.ui.timeline import Timeline
    run = synthetic_run(events_per_rank=200)
    run.events = tables.empty(tables.EVENT_COLUMNS)
    run.summary = pd.DataFrame({"rank": [0, 1], "step_ms": [2.9, 3.0]})
    tl = Timeline(run)
    assert not tl.figure.visible and not tl.controls.search.visible
    assert not tl.summary_figure.visible           # no measured parts: no empty chart
    assert tl.strip.figure.visible and len(tl.strip.steps_source.data["left"]) == len(run.steps)
    assert not tl.step_labels_source.data["text"]


def test_memory_lane_is_named_and_scaled_per_rank():
    from nbtools.ui.timeline import Timeline
    run = synthetic_run(events_per_rank=200)
    t = int(run.events["ts_ns"].min())
    n = 5000
    run.memory = pd.DataFrame({
        "rank": np.repeat([0, 1], n), "ts_ns": t + np.tile(np.arange(n) * 1000, 2),
        "allocated": np.tile(np.r_[np.arange(n - 1), 10 * n] * 2**20 / 100, 2),
        "reserved": np.full(2 * n, 200 * 2**20), "graph_pool": np.full(2 * n, 2**20)})
    tl = Timeline(run)
    fig = tl.memory.figure
    names = {r.name for r in fig.renderers}
    assert {"memory-allocated", "memory-reserved", "memory-graph-pool"} <= names
    assert fig.visible and fig.x_range is tl.figure.x_range
    d = tl.memory.source.data
    assert max(d["alloc_mb"]) == pytest.approx(500.0)       # the one-sample peak survives
    assert set(d["rank"]) == {0, 1} and len(d["left"]) < 2 * n
    assert "peak 500 MB" in fig.yaxis.major_label_overrides[0]
    run.memory = None
    tl.update(run)
    # hidden, off the timeline's range: BokehJS laid the hidden figure out on every tick
    assert not tl.memory.figure.visible and tl.memory.figure.x_range is not tl.figure.x_range


def test_memory_lane_on_cpu_says_kb_and_not_measured_never_nan():
    """The CPU allocator: a few KB allocated, no reserve (NaN), no graph pools. The row label
    and every tooltip field are words and scaled sizes: no "0.0 MB", no NaN."""
    from nbtools.common.units import fmt_bytes
    from nbtools.ui.timeline import Timeline
    run = synthetic_run(events_per_rank=200)
    t = int(run.events["ts_ns"].min())
    alloc = np.array([4096, 8192, 8224, 36_864, 8208], float)
    run.memory = pd.DataFrame({"rank": 0, "ts_ns": t + np.arange(5) * 1000, "allocated": alloc,
                               "reserved": np.nan, "graph_pool": 0.0})
    tl = Timeline(run)
    label = tl.memory.figure.yaxis.major_label_overrides[0]
    assert label == "r0 memory (peak 36 KB)", label
    d = tl.memory.source.data
    assert list(d["alloc"]) == ["4 KB", "8 KB", "8.03 KB", "36 KB", "8.02 KB"]
    assert set(d["res"]) == {"not measured on CPU"} and set(d["pool"]) == {"none on CPU"}
    tips = dict(next(t for t in tl.memory.figure.tools if hasattr(t, "tooltips")).tooltips)
    assert tips["allocated"] == "@alloc" and tips["reserved"] == "@res"
    for col in ("alloc", "res", "pool"):
        assert not any(w in str(v).lower() for v in d[col] for w in ("nan", "none mb", "0.0 mb"))
    assert fmt_bytes(2**30 * 2.5) == "2.5 GB" and fmt_bytes(512) == "512 B"
    assert fmt_bytes(float("nan"), "not measured on CPU") == "not measured on CPU"


def test_to_perfetto_has_flows_and_reads_back(tmp_path):
    from nbtools.results.run import Run
    from nbtools.trace.read_json import read_trace
    run = synthetic_run(events_per_rank=300)
    path = run.to_perfetto(tmp_path / "run.json")
    doc = json.loads(path.read_bytes())
    ev = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("name") == "process_name"}
    assert procs == {0: "rank 0", 1: "rank 1"}
    s = [e for e in ev if e.get("ph") == "s"]
    f = {e["id"]: e for e in ev if e.get("ph") == "f"}
    assert len(s) == len(f) > 0 and all(e["id"] in f for e in s)
    for e in s:                         # each end sits inside a collective slice of its rank
        end = f[e["id"]]
        assert end["pid"] != e["pid"] and end["bp"] == "e"
        assert any(x.get("ph") == "X" and x["pid"] == end["pid"] and x["tid"] == end["tid"]
                   and x["ts"] <= end["ts"] <= x["ts"] + x["dur"] for x in ev)
    # the project's own reader takes it back: every slice, on its rank's process
    _, cols = read_trace(path)
    raw = cols.columns()
    x = [e for e in ev if e.get("ph") == "X"]
    assert len(raw["ts"]) == len(x)
    for r in (0, 1):
        assert (raw["pid"] == r).sum() >= (run.events["rank"] == r).sum()
    gz = run.to_perfetto(tmp_path / "run.json.gz")
    assert json.loads(gzip.open(gz).read())["traceEvents"] == doc["traceEvents"]


def test_tooltip_details_say_shapes_bytes_and_the_collective():
    from nbtools.trace.details import describe
    assert describe([[64, 32], [16, 32], []], ["float", "float", ""], "") == \
        "inputs: f32[64, 32], f32[16, 32] · 10 KB in"
    meta = ('"Collective name": "allreduce", "In msg nelems": 4096, "Out msg nelems": 4096, '
            '"dtype": "BFloat16", "Group size": 2, "Process Group Name": "0", '
            '"Process Group Description": "default_pg", "Seq": 7')
    text = describe([[4096]], ["c10::BFloat16"], meta)
    assert text == ("inputs: bf16[4096] · 8 KB in · collective: allreduce · group: 0 · "
                    "group size: 2 · seq: 7 · in elements: 4096 · out elements: 4096 · "
                    "dtype: BFloat16 · 8 KB moved in")
    assert describe([], [], "") == "" and describe([], [], "not json") == ""


def test_timeline_tooltips_carry_details_of_single_events_only():
    from nbtools.schema import tables
    from nbtools.trace.details import DETAIL_COLUMNS
    from nbtools.ui.timeline import Timeline
    run = synthetic_run(events_per_rank=300)
    ev = run.events[run.events["category"] == "cpu_op"].head(5)
    run.event_details = tables.from_columns(dict(
        rank=ev["rank"], ts_ns=ev["ts_ns"], name=ev["name"].astype(str),
        detail=[f"inputs: f32[{i}]" for i in range(5)]), DETAIL_COLUMNS)
    tl = Timeline(run, width=4000)
    d = tl.events_source.data
    box = tl.decode()
    got = sorted(x for x, c in zip(box["detail"], box["category"])
                 if x and c != "communication")
    assert got == [f"inputs: f32[{i}]" for i in range(5)]
    # a collective whose trace has no group, ranks or bytes says so (gloo's never have them)
    comm = [(x, n) for x, c, n in zip(box["detail"], box["category"], d["count"])
            if c == "communication"]
    assert comm and all(x == "group, ranks: not recorded in the trace · bytes: not recorded "
                        "in the trace" for x, n in comm if n == 1)
    assert all(x == "" for x, n in comm if n > 1)      # a merged box is not one collective
    tips = [t for h in tl.figure.tools if getattr(h, "tooltips", None) for t in h.tooltips]
    assert ("", "@detail_i{custom}") in tips


@pytest.mark.filterwarnings("ignore")   # HTA 0.5 on pandas 3: deprecation noise
def test_hta_reads_the_perfetto_file(tmp_path):
    import logging
    from hta.common.trace import Trace   # a test dependency (pyproject [test])
    logging.getLogger("hta").setLevel(logging.ERROR)
    run = synthetic_run(events_per_rank=300)
    path = run.to_perfetto(tmp_path / "run.json")
    t = Trace(trace_files={0: str(path)}, trace_dir=str(tmp_path))
    t.parse_traces()
    df = t.get_trace(0)
    assert sorted(int(p) for p in df["pid"].unique()) == [0, 1]     # a process per rank
    assert len(df) >= len(run.events)
    names = set(t.symbol_table.get_sym_table())
    assert set(run.events["name"].astype(str)) <= names
