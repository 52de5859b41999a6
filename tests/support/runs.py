"""Synthetic runs for the tests and the timeline benchmarks: realistic multi-rank profiled
runs generated with numpy only (no GPU, no lab), a million-event one, and one whose first
compile takes minutes."""
from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from nbtools.config.step_config import StepConfig
from nbtools.results.run import Run
from nbtools.schema import tables

T_BASE = 1_700_000_000_123_456_789          # epoch ns, as real traces have
COMPUTE = np.array(["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "triton_poi_fused_add_mul_0",
                    "triton_red_fused_native_layer_norm_1",
                    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>"])
CPU_OPS = np.array(["aten::mm", "aten::add", "aten::native_layer_norm",
                    "/home/alice/proj/train.py(42): forward", "<script>alert('evt')</script>"])


def _lane(rng, n, start, span, mean_ns):
    """n non-overlapping events spread over [start, start + span)."""
    slot = span / n
    ts = start + (np.arange(n) * slot + rng.uniform(0, 0.2, n) * slot).astype(np.int64)
    dur = np.minimum(rng.lognormal(np.log(mean_ns), 0.6, n), 0.75 * slot).astype(np.int64)
    return ts, np.maximum(dur, 1)


def synthetic_run(n_ranks=2, events_per_rank=2_000, steps=3, step_ns=3_000_000, seed=0,
                  config=None, graph_from_step=None, tag="") -> Run:
    """A realistic profiled run: per rank a compute stream (with memcpy/memset and
    graph-replayed kernels), an NCCL stream, two CPU threads (ops, runtime launches,
    ProfilerStep annotations), warm-up/measured/profiled steps, compile events with a
    recompile and its reason, and a summary with the busy/communication columns."""
    rng = np.random.default_rng(seed)
    cfg = config or StepConfig(scenario="tp-mlp-infer", compile="reduce-overhead")
    first_prof = 13
    graph_from = first_prof + steps - 1 if graph_from_step is None else graph_from_step
    ev, st, ce = {k: [] for k in tables.EVENT_COLUMNS}, {k: [] for k in tables.STEP_COLUMNS}, \
        {k: [] for k in tables.COMPILE_COLUMNS}
    span = steps * step_ns
    shares = {"cuda:0:7": 0.45, "cuda:0:13": 0.05, "cpu:1001": 0.4, "cpu:1002": 0.1}
    for r in range(n_ranks):
        t_prof = T_BASE + 5_000_000_000 + r * 3_000      # ranks line up to a few µs
        for lane, share in shares.items():
            n = max(int(events_per_rank * share), steps)
            mean = {"cuda:0:7": span / n * 0.6, "cuda:0:13": span / n * 0.4}.get(lane, span / n * 0.5)
            ts, dur = _lane(rng, n, t_prof, span, mean)
            if lane == "cuda:0:7":
                cat = rng.choice(["compute", "memcpy", "memset"], n, p=[0.9, 0.06, 0.04])
                name = np.where(cat == "compute", rng.choice(COMPUTE, n),
                                np.where(cat == "memcpy", "Memcpy HtoD (Pageable -> Device)",
                                         "Memset (Device)"))
            elif lane == "cuda:0:13":
                cat = np.full(n, "communication")
                name = np.full(n, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
            else:
                cat = rng.choice(["cpu_op", "runtime"], n, p=[0.6, 0.4])
                name = np.where(cat == "cpu_op", rng.choice(CPU_OPS, n),
                                rng.choice(["cudaLaunchKernel", "cudaGraphLaunch"], n))
            step = first_prof + np.minimum((ts - t_prof) // step_ns, steps - 1)
            _add(ev, rank=np.full(n, r), lane=np.full(n, lane), category=cat, name=name,
                 ts_ns=ts, dur_ns=dur, step=step, correlation=np.arange(n),
                 graph=lane.startswith("cuda") & (step >= graph_from) & (cat != "memset"))
        for s in range(steps):    # ProfilerStep ranges: nested over the CPU ops
            _add(ev, rank=[r], lane=["cpu:1001"], category=["annotation"],
                 name=[f"ProfilerStep#{first_prof + s}"], ts_ns=[t_prof + s * step_ns],
                 dur_ns=[step_ns - 1000], step=[first_prof + s], correlation=[-1], graph=[False])
        for s in range(first_prof + steps):
            phase = "warmup" if s < 3 else "measured" if s < first_prof else "profiled"
            ts0 = t_prof + (s - first_prof) * step_ns if phase == "profiled" else \
                T_BASE + s * 50_000_000
            _add(st, rank=[r], step=[s], phase=[phase], ts_ns=[ts0], dur_ns=[step_ns - 1000])
        kinds = [("compile", "", 2_000_000_000, 0), ("recompile",
                 "tensor 'x' size mismatch at index 0. expected 8, actual 16", 800_000_000, 1),
                 ("graph_break", "call_function print in /root/proj/model.py:17", 0, 1),
                 ("cudagraph_skip", "skipping cudagraphs due to mutated inputs (1 instances)", 0, 2)]
        if r == 1:   # one rank hit the limit: a divergence the report must show
            kinds.append(("limit_hit", "cache_size_limit reached (8)", 0, 2))
        for i, (kind, reason, dur, step) in enumerate(kinds):
            _add(ce, rank=[r], kind=[kind], name=["forward"], frame=["/home/alice/proj/model.py:31"],
                 reason=[reason], compile_id=[f"0/{i}"], ts_ns=[T_BASE + step * 50_000_000 + i * 1000],
                 dur_ns=[dur], step=[step], graphs=[1 if "compile" in kind else 0], ops=[12],
                 guards=[30], cache=["miss" if kind == "compile" else ""])
    events = tables.from_columns({k: np.concatenate([np.asarray(v) for v in vs])
                                  for k, vs in ev.items()}, tables.EVENT_COLUMNS)
    summary = pd.DataFrame({"rank": np.arange(n_ranks), "step_ms": 2.9, "gpu_busy_pct": 71.0,
                            "compute_ms": 1.8, "comm_ms": 0.6, "exposed_comm_ms": 0.3,
                            "idle_ms": 0.8, "recompiles": 1})
    env = {"torch": "2.11.0+cu130", "cuda": "13.0", "nccl": "2.27.5", "world_size": n_ranks,
           "gpus": ["NVIDIA H200"] * n_ranks, "hosts": ["gpu-node-1"],
           "ipp_key": "a1b2c3d4-FAKE-CONNECTION-KEY-e5f6", "username": "alice",
           "cwd": "/home/alice/proj", "environ": {"HOME": "/root", "SECRET_TOKEN": "hunter2"}}
    run = Run(config=cfg, steps=_table(st, tables.STEP_COLUMNS), events=events,
              compile_events=_table(ce, tables.COMPILE_COLUMNS), summary=summary, env=env,
              flags=["rank 1 hit the recompile limit (divergent ranks)"] + ([tag] if tag else []))
    return run


@functools.lru_cache(maxsize=1)
def million_run() -> Run:
    """1M events over 8 ranks (shared by the timeline and report tests; ~2 s to make)."""
    return synthetic_run(n_ranks=8, events_per_rank=125_000, step_ns=100_000_000, seed=1)


def _add(cols, **kw):
    for k, v in kw.items():
        cols[k].append(np.asarray(v))


def _table(cols, schema):
    return tables.from_columns({k: np.concatenate(v) for k, v in cols.items()}, schema)


def long_compile_run(compile_s: float = 116.0):
    """synthetic_run whose first compile (inside warm-up step 0) takes ``compile_s``: every
    later step, compile event and timeline event starts that much later."""
    run = synthetic_run(events_per_rank=300, seed=7)
    ce, st = run.compile_events.copy(), run.steps.copy()
    first = (ce["kind"] == "compile").to_numpy()
    t_c = int(ce.loc[first, "ts_ns"].min())
    d = int(compile_s * 1e9)
    ce.loc[first, "dur_ns"] = d
    ce.loc[~first, "ts_ns"] += d
    later = (st["step"] > 0).to_numpy()
    st.loc[later, "ts_ns"] += d
    st.loc[~later, "dur_ns"] = d + (t_c - st.loc[~later, "ts_ns"]) + 5_000_000
    run.compile_events, run.steps = ce, st
    run.events = run.events.assign(ts_ns=run.events["ts_ns"] + d)
    return run
