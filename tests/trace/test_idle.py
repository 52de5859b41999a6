"""Why the GPU waits (nbtools/analysis/idle.py): HolisticTraceAnalysis's idle time breakdown
on HTA's own traces and ours, the summary's split of idle_ms, and where the host was."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nbtools import load_traces
from nbtools.analysis import idle
from nbtools.analysis.breakdown import rank_table
from nbtools.analysis.step_metrics import per_step
from nbtools.common.package_data import h200_traces_dir
from support.paths import FIXTURES

EXPECTED = json.loads((FIXTURES / "expected_idle.json").read_text())
H200 = h200_traces_dir()


def _trace(name: str) -> Path:
    return FIXTURES / "hta" / name if (FIXTURES / "hta" / name).exists() else H200 / name


def _load(name: str):
    path = _trace(name)
    # HTA's fixtures without distributedInfo: the rank is HTA's own (0)
    try:
        return load_traces(path)
    except Exception:
        return load_traces(path, rank=0)


@pytest.mark.parametrize("name", sorted(EXPECTED["traces"]))
def test_stream_idle_is_htas_idle_time_breakdown(name):
    """Per stream and kind, the idle time HTA's own code computed on the same file
    (tests/fixtures/make_fixtures.py; HTA rounds its table to 0.01 us)."""
    run = _load(name)
    ours = idle.stream_idle(idle.hta_selection(run.events))
    assert ours["lane"].str.split(":").str[1].nunique() <= 1, "one device per trace here"
    ours["stream"] = ours["lane"].str.split(":").str[-1].astype(int)
    got = ours.groupby(["stream", "idle_category"])["idle_ms"].sum() * 1e3
    want = {(s, k): us for s, k, us, _ in EXPECTED["traces"][name]}
    # HTA lists a kind only where some gap has it (and "other" for a stream's first
    # kernel, which has no gap before it): a kind missing on one side is 0 there
    for key in set(want) | set(got.index):
        assert got.get(key, 0.0) == pytest.approx(want.get(key, 0.0), rel=1e-5, abs=0.011), \
            (name, key)
    assert sum(want.values()) > 0 or name.startswith("triton")


def test_live_hta_agrees_on_a_trace_of_ours(tmp_path, monkeypatch):
    """The expected file is HTA's code, not a copy of ours: run HTA now on one H200 trace."""
    import logging
    import shutil
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    from hta.configs.config import logger
    from hta.trace_analysis import TraceAnalysis
    logger.setLevel(logging.ERROR)
    shutil.copy(H200 / "tp_off_rank0.json.gz", tmp_path)
    t = TraceAnalysis(trace_dir=str(tmp_path))
    hta, _ = t.get_idle_time_breakdown(ranks=t.t.get_ranks(), visualize=False)
    ours = idle.stream_idle(idle.hta_selection(load_traces(H200 / "tp_off_rank0.json.gz").events))
    ours["stream"] = ours["lane"].str.split(":").str[-1].astype(int)
    got = ours.set_index(["stream", "idle_category"])["idle_ms"] * 1e3
    for r in hta.itertuples():
        assert got[(r.stream, r.idle_category)] == pytest.approx(r.idle_time, abs=0.011)
    assert hta["idle_time"].sum() > 1000      # the trace waits: a real comparison


@pytest.mark.parametrize("name", ["tp_off_rank0.json.gz", "tp_reduce-overhead_rank1.json.gz",
                                  "trace_diff_test_test.json.gz",
                                  "negative_queue_length_values_check_rank0.json.gz"])
def test_each_steps_waits_add_up_to_its_idle_time(name):
    """host + kernel + other wait = the step's idle_ms (the same gaps), and the host causes
    add up to host_wait_ms, step by step; the summary keeps both sums (means add)."""
    ev = _load(name).events
    both = per_step(ev).merge(idle.step_waits(ev), on=["rank", "step"], how="left")
    gpu = both[both["device"] == "gpu"]
    assert len(gpu)
    waits = gpu[list(idle.WAITS)].fillna(0).sum(axis=1)
    assert np.allclose(waits, gpu["idle_ms"], atol=1e-9)
    causes = gpu[list(idle.HOST_COLUMNS)].fillna(0).sum(axis=1)
    assert np.allclose(causes, gpu["host_wait_ms"].fillna(0), atol=1e-9)
    rt = rank_table(ev, pd.DataFrame(columns=["rank", "step", "phase", "ts_ns", "dur_ns"]))
    assert np.allclose(rt[list(idle.WAITS)].sum(axis=1), rt["idle_ms"])


def test_eager_tp_waits_on_its_host_and_graph_replay_does_not():
    """2 x H200, tp-mlp-infer batch 1: eager waited on the host for most of its idle time;
    the same step replayed as CUDA graphs has almost no host wait left."""
    eager = rank_table(load_traces(H200 / "tp_off_rank0.json.gz").events,
                       pd.DataFrame(columns=["rank", "step", "phase", "ts_ns", "dur_ns"]))
    graphs = rank_table(load_traces(H200 / "tp_reduce-overhead_rank0.json.gz").events,
                        pd.DataFrame(columns=["rank", "step", "phase", "ts_ns", "dur_ns"]))
    e, g = eager.iloc[0], graphs.iloc[0]
    assert e["host_wait_ms"] > 0.9 * e["idle_ms"] > 0
    assert e["host_wait_ms"] / e["profiled_window_ms"] > 0.5
    assert g["host_wait_ms"] < 0.1 * e["host_wait_ms"]
    # eager launches kernel by kernel: launch calls are part of where its host time went
    assert e["host_launch_ms"] > 0


def _events(rows):
    df = pd.DataFrame(rows, columns=["lane", "category", "name", "ts_ns", "dur_ns", "step",
                                     "correlation"])
    df.insert(0, "rank", np.int32(0))
    df["graph"] = False
    for c in ("lane", "category", "name"):
        df[c] = df[c].astype("category")
    return df.astype({"ts_ns": np.int64, "dur_ns": np.int64, "step": np.int32,
                      "correlation": np.int64})


def test_a_host_wait_goes_to_what_the_launching_thread_was_inside():
    """One step: kernel A, then 100 us idle before kernel B, launched at the end of it by
    thread 1. During the gap thread 1 was in the optimizer (40 us, 10 of them blocked in a
    cudaStreamSynchronize inside it), then in a compiled region (30 us), then in nothing
    named (30 us). Thread 2's optimizer at the same time is not the launcher's: not counted."""
    us = 1000
    rows = [
        ("cpu:1", "annotation", "nbtools/step 0", 0, 300 * us, -1, -1),
        ("cpu:1", "runtime", "cudaLaunchKernel", 5 * us, 5 * us, -1, 1),
        ("cuda:0:7", "compute", "kernel_A", 20 * us, 80 * us, -1, 1),       # ends at 100 us
        ("cpu:1", "annotation", "Optimizer.step#AdamW.step", 100 * us, 40 * us, -1, -1),
        ("cpu:1", "sync", "cudaStreamSynchronize", 120 * us, 10 * us, -1, -1),
        ("cpu:1", "cpu_op", "Torch-Compiled Region: 0/0", 140 * us, 30 * us, -1, -1),
        ("cpu:2", "annotation", "Optimizer.step#AdamW.step", 100 * us, 100 * us, -1, -1),
        ("cpu:1", "runtime", "cudaLaunchKernel", 199 * us, 1 * us, -1, 2),
        ("cuda:0:7", "compute", "kernel_B", 200 * us, 50 * us, -1, 2),
    ]
    ev = _events(rows)
    ev["step"] = np.int32(0)
    w = idle.step_waits(ev).iloc[0]
    assert w["host_wait_ms"] == pytest.approx(0.100)
    assert w["kernel_wait_ms"] == 0 and w["other_wait_ms"] == 0
    assert w["host_sync_ms"] == pytest.approx(0.010)
    assert w["host_optimizer_ms"] == pytest.approx(0.030)
    assert w["host_compiled_ms"] == pytest.approx(0.030)
    assert w["host_launch_ms"] == pytest.approx(0.001)       # B's own launch call
    assert w["host_other_ms"] == pytest.approx(0.029)
    g = idle.gaps(ev)
    assert list(g["kind"]) == ["host_wait"] and g["next"].iloc[0] == "kernel_B"
    assert g["thread"].iloc[0] == "cpu:1"


def test_kernel_wait_and_other_follow_the_gap_and_the_launch():
    """Kernels launched ahead: a 10 us gap is kernel wait, a 50 us gap is other (HTA's 30 us
    threshold); neither is charged to the host."""
    us = 1000
    rows = [
        ("cpu:1", "runtime", "cudaLaunchKernel", 0, 2 * us, -1, 1),
        ("cpu:1", "runtime", "cudaLaunchKernel", 3 * us, 2 * us, -1, 2),
        ("cpu:1", "runtime", "cudaLaunchKernel", 6 * us, 2 * us, -1, 3),
        ("cuda:0:7", "compute", "k1", 10 * us, 10 * us, -1, 1),
        ("cuda:0:7", "compute", "k2", 30 * us, 10 * us, -1, 2),      # 10 us after k1
        ("cuda:0:7", "compute", "k3", 90 * us, 10 * us, -1, 3),      # 50 us after k2
    ]
    ev = _events(rows)
    ev["step"] = np.int32(0)
    w = idle.step_waits(ev).iloc[0]
    assert (w["host_wait_ms"], w["kernel_wait_ms"], w["other_wait_ms"]) == \
        pytest.approx((0.0, 0.010, 0.050))
    assert w[list(idle.HOST_COLUMNS)].sum() == 0


def test_cpu_ranks_have_no_wait_split():
    """A CPU rank has no GPU to wait: its wait columns are NaN, not zero."""
    rows = [("cpu:1", "cpu_op", "aten::mm", 0, 10_000, 0, -1),
            ("cpu:1", "cpu_op", "aten::add", 20_000, 10_000, 0, -1)]
    ev = _events(rows)
    rt = rank_table(ev, pd.DataFrame(columns=["rank", "step", "phase", "ts_ns", "dur_ns"]))
    assert rt["device"].iloc[0] == "cpu"
    assert rt[list(idle.WAITS + idle.HOST_COLUMNS)].isna().all(axis=None)


def test_a_cpu_ranks_step_splits_by_the_same_causes_and_adds_up():
    """A CPU rank has no GPU to wait for, so its whole step is split: 1 ms step on thread 1
    with forward 300 us (100 of them in a compiled graph), backward 400 us (150 of them in
    a gloo collective the hook waits for), the optimizer 200 us, 100 us of nothing named.
    Thread 2's gloo work at the same time is not the step's thread: not counted. A second
    step and a second rank each get their own row."""
    us = 1000
    step0 = [
        ("cpu:1", "annotation", "nbtools/step 0", 0, 1000 * us, 0, -1),
        ("cpu:1", "annotation", "forward", 0, 300 * us, 0, -1),
        ("cpu:1", "cpu_op", "Torch-Compiled Region: 0/0", 100 * us, 100 * us, 0, -1),
        ("cpu:1", "annotation", "backward", 300 * us, 400 * us, 0, -1),
        ("cpu:1", "cpu_op", "c10d::allreduce_", 500 * us, 150 * us, 0, -1),
        ("cpu:1", "annotation", "Optimizer.step#SGD.step", 700 * us, 200 * us, 0, -1),
        ("cpu:2", "comm", "gloo:all_reduce", 0, 900 * us, 0, -1),
    ]
    step1 = [("cpu:1", "annotation", "nbtools/step 1", 2000 * us, 500 * us, 1, -1),
             ("cpu:1", "annotation", "forward", 2000 * us, 500 * us, 1, -1)]
    ev = _events(step0 + step1)
    other = _events(step0).assign(rank=np.int32(1))
    ev = pd.concat([ev, other], ignore_index=True)
    for c in ("lane", "category", "name"):
        ev[c] = ev[c].astype("category")
    t = idle.cpu_step_split(ev)
    assert list(zip(t["rank"], t["step"])) == [(0, 0), (0, 1), (1, 0)]
    first = t.iloc[0]
    assert first["step_ms"] == pytest.approx(1.0)
    assert first[list(idle.HOST_COLUMNS)].sum() == pytest.approx(1.0)
    assert (first["host_forward_ms"], first["host_compiled_ms"], first["host_autograd_ms"],
            first["host_hooks_ms"], first["host_optimizer_ms"], first["host_other_ms"]) == \
        pytest.approx((0.2, 0.1, 0.25, 0.15, 0.2, 0.1))
    assert t.iloc[1]["host_forward_ms"] == pytest.approx(0.5)


def test_cpu_step_split_leaves_gpu_ranks_to_the_wait_split():
    """A rank with GPU work is not split here (its step is judged by the GPU's waits)."""
    run = load_traces(H200 / "tp_off_rank0.json.gz")
    assert len(idle.cpu_step_split(run.events)) == 0
    assert all(d.device == "gpu" and "GPU idled" in d.text for d in run.why())


def test_a_recompile_inside_the_step_is_compiling_not_the_forward():
    """A host-wait gap the launching thread spent in Dynamo's timed compile phases (a
    recompile on a new shape) is 'compiling', even where the compile syncs or launches
    (autotuning); the same on a CPU rank's step."""
    us = 1000
    rows = [
        ("cpu:1", "annotation", "nbtools/step 0", 0, 400 * us, -1, -1),
        ("cpu:1", "runtime", "cudaLaunchKernel", 5 * us, 5 * us, -1, 1),
        ("cuda:0:7", "compute", "kernel_A", 20 * us, 80 * us, -1, 1),       # ends at 100 us
        ("cpu:1", "annotation", "forward", 90 * us, 300 * us, -1, -1),
        ("cpu:1", "cpu_op", "_compile.compile_inner (dynamo_timed)", 100 * us, 250 * us, -1, -1),
        ("cpu:1", "sync", "cudaStreamSynchronize", 200 * us, 20 * us, -1, -1),
        ("cpu:1", "runtime", "cudaLaunchKernel", 380 * us, 10 * us, -1, 2),
        ("cuda:0:7", "compute", "kernel_B", 395 * us, 5 * us, -1, 2),
    ]
    ev = _events(rows)
    ev["step"] = np.int32(0)
    w = idle.step_waits(ev).iloc[0]
    assert w["host_wait_ms"] == pytest.approx(0.295)
    assert w["host_compiling_ms"] == pytest.approx(0.250)
    assert w["host_sync_ms"] == 0
    assert w["host_forward_ms"] == pytest.approx(0.030)     # 350-380 us
    assert w["host_launch_ms"] == pytest.approx(0.010)
    assert w["host_other_ms"] == pytest.approx(0.005)       # 390-395 us
    cpu = _events([r for r in rows if r[0] == "cpu:1" and r[1] != "runtime"])
    cpu["step"] = np.int32(0)
    t = idle.cpu_step_split(cpu).iloc[0]
    assert t["host_compiling_ms"] == pytest.approx(0.250)
    assert t["host_forward_ms"] == pytest.approx(0.050) and t["step_ms"] == pytest.approx(0.4)


def test_a_trace_without_forward_ranges_takes_the_time_before_backward_as_forward():
    """A person's own trace has no forward range (nbtools opens those): on a thread-step
    with a backward, what comes before the backward and is not named otherwise is the
    forward; after it, unnamed time stays 'other'. A step without a backward (inference)
    cannot be told apart: all of it stays 'other'."""
    us = 1000
    rows = [
        ("cpu:1", "annotation", "ProfilerStep#0", 0, 1000 * us, 0, -1),
        ("cpu:1", "cpu_op", "aten::linear", 10 * us, 200 * us, 0, -1),
        ("cpu:1", "cpu_op", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
         250 * us, 50 * us, 0, -1),
        ("cpu:1", "cpu_op", "autograd::engine::evaluate_function: AddmmBackward0",
         400 * us, 300 * us, 0, -1),
        ("cpu:1", "annotation", "Optimizer.step#AdamW.step", 700 * us, 100 * us, 0, -1),
        ("cpu:1", "annotation", "ProfilerStep#1", 2000 * us, 500 * us, 1, -1),
        ("cpu:1", "cpu_op", "aten::linear", 2000 * us, 400 * us, 1, -1),
    ]
    ev = _events(rows)
    t = idle.cpu_step_split(ev)
    a, b = t.iloc[0], t.iloc[1]
    assert (a["host_forward_ms"], a["host_batch_ms"], a["host_autograd_ms"],
            a["host_optimizer_ms"], a["host_other_ms"]) == \
        pytest.approx((0.35, 0.05, 0.3, 0.1, 0.2))
    assert b["host_forward_ms"] == 0 and b["host_other_ms"] == pytest.approx(0.5)
