"""Real traces from 2 H200s (torch 2.11, NCCL 2.28.9): the tp-mlp-infer scenario, batch 1,
8 blocks of d=4096, eager and mode="reduce-overhead", 3 profiled steps, written by
benchmarks/gpu/check_assumptions.py. Expected counts were read from the JSON with a plain
parser (see the comments), not from nbtools."""
import pytest

from nbtools import load_traces
from nbtools.analysis.step_metrics import per_rank
from nbtools.common.package_data import h200_traces_dir

H200 = h200_traces_dir()   # shipped in the package: notebooks 01 and 02 load them


@pytest.fixture(scope="module", params=["off", "reduce-overhead"])
def run(request):
    return request.param, load_traces([H200 / f"tp_{request.param}_rank0.json.gz",
                                       H200 / f"tp_{request.param}_rank1.json.gz"])


def test_both_ranks_and_nccl_kernels_are_communication(run):
    mode, r = run
    ev = r.events
    assert sorted(ev["rank"].unique()) == [0, 1]
    gpu = ev[ev["lane"].astype(str).str.startswith("cuda:")]
    comm = gpu[gpu["category"] == "communication"]
    # 8 all-reduces per step x 3 steps per rank, all ncclDevKernel_AllReduce_*
    assert (comm.groupby("rank").size() == 24).all()
    assert comm["name"].astype(str).str.startswith("ncclDevKernel_AllReduce").all()


def test_graph_replays_are_marked(run):
    mode, r = run
    ev = r.events
    kernels = ev[ev["category"].isin(["compute", "communication"]) & ev["lane"].astype(str).str.startswith("cuda:")]
    graph = kernels[kernels["graph"]]
    if mode == "off":
        assert graph.empty
        assert (kernels.groupby("rank").size() == 144).all()     # 144 kernels per rank
    else:
        # 126 kernels per rank, 123 of them correlate with a cudaGraphLaunch
        assert (kernels.groupby("rank").size() == 126).all()
        assert (graph.groupby("rank").size() == 123).all()
        assert graph[graph["category"] == "communication"].groupby("rank").size().eq(24).all()


def test_gpu_annotations_are_not_work(run):
    mode, r = run
    ev = r.events
    gpu_ann = ev[(ev["category"] == "annotation") & ev["lane"].astype(str).str.startswith("cuda:")]
    assert len(gpu_ann) == 2 * 27          # 27 gpu_user_annotation events per rank
    m = per_rank(ev)
    # kernels only: graph replay covers nearly all GPU time under reduce-overhead
    if mode == "reduce-overhead":
        assert (m["graph_coverage_pct"] > 90).all(), m
    else:
        assert (m["graph_coverage_pct"] == 0).all()
    # TP all-reduces wait for the matmuls before them: little of the communication overlaps
    assert (m["overlap_pct"] < 50).all(), m[["rank", "overlap_pct"]]
