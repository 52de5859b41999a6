"""Analysis numbers against values worked out by hand (small tables, arithmetic in the
comments) and against HTA's own code and a brute-force 1-µs bitmap on a fixture cut from a
real trace (tests/fixtures/make_fixtures.py)."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from nbtools.analysis import step_metrics as analysis
from nbtools.schema import tables
from nbtools.results.load import load_traces
from support.paths import FIXTURES

US = 1000   # the hand tables are written in µs; the table holds ns


def table(rows) -> pd.DataFrame:
    """rows: (rank, lane, category, name, ts_us, dur_us, step, correlation, graph)."""
    cols = list(zip(*rows))
    return tables.from_columns({
        "rank": cols[0], "lane": cols[1], "category": cols[2], "name": cols[3],
        "ts_ns": [t * US for t in cols[4]], "dur_ns": [d * US for d in cols[5]],
        "step": cols[6], "correlation": cols[7], "graph": cols[8]}, tables.EVENT_COLUMNS)


S7, S13, CPU = "cuda:0:7", "cuda:0:13", "cpu:100"
# rank 0, one step (0..400 µs on the host):
#   compute on stream 7:  [0,100) launched at -20 (corr 1), [150,250) replayed by a graph
#                         launched at 100 (corr 2)
#   NCCL on stream 13:    [50,200) launched at 40 (corr 3)
#   memcpy on stream 7:   [260,270)
RANK0 = [
    (0, CPU, "annotation", "nbtools/step 0", -30, 400, 0, -1, False),
    (0, CPU, "runtime", "cudaLaunchKernel", -20, 5, 0, 1, False),
    (0, CPU, "runtime", "cudaLaunchKernel", 40, 5, 0, 3, False),
    (0, CPU, "runtime", "cudaGraphLaunch", 100, 5, 0, 2, False),
    (0, CPU, "sync", "cudaStreamSynchronize", 300, 60, 0, 9, False),
    (0, S7, "compute", "gemm", 0, 100, 0, 1, False),
    (0, S13, "communication", "ncclKernel_AllReduce", 50, 150, 0, 3, False),
    (0, S7, "compute", "relu", 150, 100, 0, 2, True),
    (0, S7, "memcpy", "Memcpy DtoH", 260, 10, 0, 8, False),
]
# rank 1: the same collective starts 30 µs later; its step is 500 µs long
RANK1 = [
    (1, CPU, "annotation", "nbtools/step 0", -30, 500, 0, -1, False),
    (1, CPU, "runtime", "cudaLaunchKernel", 60, 5, 0, 3, False),
    (1, S13, "communication", "ncclKernel_AllReduce", 80, 100, 0, 3, False),
    (1, S7, "compute", "gemm", 0, 50, 0, -1, False),
]


def test_union_is_the_covered_length():
    g = np.array([0, 0, 0, 1, 1, 1, 2])
    s = np.array([0, 5, 20, 100, 100, 110, 7])
    e = np.array([10, 15, 30, 200, 120, 130, 7])
    # group 0: [0,15) + [20,30) = 25; group 1: [100,200) holds the others = 100;
    # group 2: one empty interval = 0; group 3: no interval = 0
    assert analysis.union_ns(g, s, e, 4).tolist() == [25, 100, 0, 0]
    # order of the input does not matter
    p = np.random.default_rng(0).permutation(len(g))
    assert analysis.union_ns(g[p], s[p], e[p], 4).tolist() == [25, 100, 0, 0]
    assert analysis.union_ns(g[:0], s[:0], e[:0], 2).tolist() == [0, 0]


def test_per_rank_by_hand():
    pr = analysis.per_rank(table(RANK0 + RANK1)).set_index("rank")
    n = len(analysis.PER_RANK_COLUMNS) - 1
    assert list(pr.columns[:n]) == analysis.PER_RANK_COLUMNS[1:]
    r0 = pr.loc[0]
    assert r0["device"] == "gpu"
    # compute = [0,100) + [150,250) = 200 µs; comm = [50,200) = 150 µs
    assert r0["compute_ms"] == pytest.approx(0.200)
    assert r0["comm_ms"] == pytest.approx(0.150)
    assert r0["memcpy_ms"] == pytest.approx(0.010)
    # comm while compute runs: [50,100) + [150,200) = 100 of 150 µs -> 66.67 %, 50 exposed
    assert r0["overlap_pct"] == pytest.approx(100 * 100 / 150)
    assert r0["exposed_comm_ms"] == pytest.approx(0.050)
    # GPU busy: [0,250) + [260,270) = 260 of the 270 µs span; idle = 10 µs
    assert r0["gpu_busy_pct"] == pytest.approx(100 * 260 / 270)
    assert r0["idle_ms"] == pytest.approx(0.010)
    # compute-busy leaves the NCCL kernel out (its time includes waiting): 200 of 270 µs
    assert r0["compute_busy_pct"] == pytest.approx(100 * 200 / 270)
    # kernel time 100 + 150 + 100 = 350 µs, 100 of it replayed from a graph
    assert r0["graph_coverage_pct"] == pytest.approx(100 * 100 / 350)
    assert (r0["kernels"], r0["comm_kernels"], r0["graph_kernels"]) == (3, 1, 1)
    # queue delays: gemm 0-(-20)=20, nccl 50-40=10, relu 150-100=50 -> median 20 µs
    assert r0["queue_delay_us_median"] == pytest.approx(20)
    assert r0["syncs"] == 1
    assert r0["annotated_step_ms"] == pytest.approx(0.400)
    r1 = pr.loc[1]
    # rank 1: comm [80,180), compute [0,50): no overlap, all 100 µs exposed
    assert r1["overlap_pct"] == 0 and r1["exposed_comm_ms"] == pytest.approx(0.100)
    assert r1["queue_delay_us_median"] == pytest.approx(20)   # 80 - 60
    assert r1["graph_coverage_pct"] == 0


def test_cpu_only_rank_reports_cpu_busy():
    # a gloo run: aten ops on the main thread, the collective on gloo's thread
    ev = table([(0, "cpu:1", "cpu_op", "aten::mm", 0, 100, 0, -1, False),
                (0, "cpu:2", "communication", "gloo:all_reduce", 50, 100, 0, -1, False),
                (0, "cpu:1", "annotation", "nbtools/step 0", 0, 200, 0, -1, False)])
    r = analysis.per_rank(ev).iloc[0]
    assert r["device"] == "cpu"
    assert np.isnan(r["gpu_busy_pct"]) and np.isnan(r["graph_coverage_pct"])
    assert np.isnan(r["queue_delay_us_median"]) and r["kernels"] == 0
    # compute [0,100), comm [50,150): overlap 50 of 100; busy [0,150) over a 150 µs span
    assert r["overlap_pct"] == pytest.approx(50)
    assert r["exposed_comm_ms"] == pytest.approx(0.050)
    assert r["cpu_busy_pct"] == pytest.approx(100)


def test_per_step_and_slowest_rank():
    ev = table(RANK0 + RANK1 + [
        (0, CPU, "annotation", "nbtools/step 1", 400, 300, 1, -1, False),
        (0, S7, "compute", "gemm", 450, 100, 1, -1, False),
        (1, CPU, "annotation", "nbtools/step 1", 500, 200, 1, -1, False)])
    ps = analysis.per_step(ev).set_index(["rank", "step"])
    assert ps.loc[(0, 0), "step_ms"] == pytest.approx(0.4)
    assert ps.loc[(0, 0), "overlap_pct"] == pytest.approx(100 * 100 / 150)
    assert ps.loc[(0, 1), "compute_ms"] == pytest.approx(0.1)
    assert ps.loc[(1, 1), "step_ms"] == pytest.approx(0.2)
    slow = analysis.slowest_rank_per_step(ev).set_index("step")
    # step 0: rank 0 400 µs, rank 1 500 µs; step 1: 300 vs 200
    assert (slow.loc[0, "slowest_rank"], slow.loc[0, "fastest_rank"]) == (1, 0)
    assert (slow.loc[1, "slowest_rank"], slow.loc[1, "slowest_ms"]) == (0, pytest.approx(0.3))
    assert slow.loc[0, "spread_pct"] == pytest.approx(100 * (0.5 - 0.4) / 0.45)


def test_collective_skew_matches_kth_kernel():
    extra = [(0, S13, "communication", "ncclKernel_AllReduce", 1000, 10, 1, -1, False),
             (1, S13, "communication", "ncclKernel_AllReduce", 1005, 10, 1, -1, False)]
    sk = analysis.collective_skew(table(RANK0 + RANK1 + extra))
    assert sk["k"].tolist() == [0, 1]
    # 1st all-reduce: rank 0 at 50, rank 1 at 80 -> 30 µs, rank 1 last; 2nd: 5 µs
    assert sk["skew_us"].tolist() == pytest.approx([30, 5])
    assert sk["last_rank"].tolist() == [1, 1] and sk["first_rank"].tolist() == [0, 0]


def test_top_kernels():
    top = analysis.top_kernels(table(RANK0 + RANK1), 2)
    # ncclKernel_AllReduce 150 + 100 = 250 µs; gemm 100 + 50 = 150 µs of 500 µs
    assert top["name"].tolist() == ["ncclKernel_AllReduce", "gemm"]
    assert top["total_ms"].tolist() == pytest.approx([0.25, 0.15])
    assert top["pct"].tolist() == pytest.approx([50, 30])
    assert top["ranks"].tolist() == [2, 2]


def test_empty_table():
    empty = tables.empty(tables.EVENT_COLUMNS)
    for fn in (analysis.per_rank, analysis.per_step, analysis.collective_skew,
               analysis.slowest_rank_per_step, analysis.top_kernels):
        assert len(fn(empty)) == 0


# --- a window of a real trace ----------------------------------------------------------

def _raw_fixture():
    expected = json.loads((FIXTURES / "expected.json").read_text())
    doc = json.loads(gzip.open(FIXTURES / expected["fixture"]).read())
    return expected, [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def _bitmap(intervals, lo, hi):
    """1-µs cells covered by any [ts, ts+dur): exact for this integer-µs trace."""
    cells = np.zeros(hi - lo + 1, bool)
    for ts, dur in intervals:
        cells[ts - lo:ts - lo + dur] = True
    return cells


def test_fixture_against_hta_and_a_bitmap():
    expected, raw = _raw_fixture()
    run = load_traces(FIXTURES / expected["fixture"])
    r = run.summary.iloc[0]
    # HTA's own get_comm_comp_overlap on the same file (rounded to 2 decimals by HTA)
    assert r["overlap_pct"] == pytest.approx(expected["hta"]["comp_comm_overlap_pctg"], abs=0.006)

    kernels = [e for e in raw if e["cat"] == "kernel"]
    comm = [(e["ts"], e["dur"]) for e in kernels if e["name"].startswith("nccl")]
    comp = [(e["ts"], e["dur"]) for e in kernels if not e["name"].startswith("nccl")]
    lo = min(e["ts"] for e in raw)
    hi = max(e["ts"] + e["dur"] for e in raw)
    c, k = _bitmap(comm, lo, hi), _bitmap(comp, lo, hi)
    assert r["comm_ms"] == pytest.approx(c.sum() / 1e3)
    assert r["compute_ms"] == pytest.approx(k.sum() / 1e3)
    assert r["overlap_pct"] == pytest.approx(100 * (c & k).sum() / c.sum())
    assert r["exposed_comm_ms"] == pytest.approx((c & ~k).sum() / 1e3)

    # graph coverage and queue delay straight from the JSON, through args.correlation
    launches = {e["args"]["correlation"]: e for e in raw
                if e["cat"] == "cuda_runtime" and "correlation" in e.get("args", {})}
    graph = {c for c, e in launches.items() if e["name"] == "cudaGraphLaunch"}
    in_graph = [e["args"]["correlation"] in graph for e in kernels]
    total = sum(e["dur"] for e in kernels)
    assert sum(in_graph) == r["graph_kernels"] > 100
    assert r["graph_coverage_pct"] == pytest.approx(
        100 * sum(e["dur"] for e, g in zip(kernels, in_graph) if g) / total)
    delays = [e["ts"] - launches[e["args"]["correlation"]]["ts"] for e in kernels
              if e["args"]["correlation"] in launches]
    assert r["queue_delay_us_median"] == pytest.approx(np.median(delays))
    assert r["kernels"] == len(kernels) and r["comm_kernels"] == len(comm)


def test_idle_gaps():
    gaps = analysis.idle_gaps(table(RANK0 + RANK1))
    # rank 0: busy [0,250) then memcpy [260,270) -> one 10 µs gap at 250;
    # rank 1: gemm [0,50), nccl [80,180) -> one 30 µs gap at 50
    assert gaps[["rank", "ts_ns", "dur_ns"]].values.tolist() == [[0, 250 * US, 10 * US],
                                                                  [1, 50 * US, 30 * US]]
    pr = analysis.per_rank(table(RANK0 + RANK1))
    assert (gaps.groupby("rank")["dur_ns"].sum() / 1e6).tolist() == pytest.approx(
        pr["idle_ms"].tolist())
    assert len(analysis.idle_gaps(table(RANK0 + RANK1), min_us=20)) == 1


def test_cpu_rank_blocked_in_a_collective_is_not_computing():
    """Worked out by hand (ns): main thread cpu:1 runs aten::add [0,100) that blocks in
    wait_tensor [40,90); gloo's thread cpu:2 runs gloo:all_reduce [30,95).
    compute = [0,40)+[90,100) = 50; comm = [30,95) = 65;
    overlap = compute while gloo communicates = [30,40)+[90,95) = 15; exposed = 65-15 = 50."""
    from nbtools.schema import tables
    from nbtools.analysis.step_metrics import per_rank
    ev = tables.from_columns(dict(
        rank=[0, 0, 0], lane=["cpu:1", "cpu:1", "cpu:2"],
        category=["cpu_op", "communication", "communication"],
        name=["aten::add", "_c10d_functional::wait_tensor", "gloo:all_reduce"],
        ts_ns=[0, 40, 30], dur_ns=[100, 50, 65], step=[0, 0, 0], correlation=[-1, -1, -1],
        graph=[False] * 3), tables.EVENT_COLUMNS)
    m = per_rank(ev).iloc[0]
    assert m["compute_ms"] * 1e6 == pytest.approx(50)
    assert m["comm_ms"] * 1e6 == pytest.approx(65)
    assert m["exposed_comm_ms"] * 1e6 == pytest.approx(50)
    assert m["overlap_pct"] == pytest.approx(100 * 15 / 65)
