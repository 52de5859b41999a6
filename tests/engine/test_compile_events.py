"""CompileRecorder against real torch.compile on CPU (single process), and divergence().

Backends: eager / aot_eager where the point is Dynamo (fast); one inductor test for the
cache and time split. Reason strings asserted here are the ones torch 2.13 prints.
"""
import inspect
import logging
import os
import time

import pandas as pd
import pytest

import torch  # noqa: E402

from nbtools.schema import tables  # noqa: E402
from nbtools.engine.compile_recorder import CompileRecorder, divergence  # noqa: E402


@pytest.fixture
def rec():
    torch._dynamo.reset()          # fresh caches; also clears Dynamo's callbacks ...
    r = CompileRecorder()
    r.install()                    # ... so install after it, as the engine does
    yield r
    r.uninstall()
    torch._dynamo.reset()


def table(out):
    return tables.from_wire(tables.COMPILE_COLUMNS, out["columns"])


def line_of(fn, marker):
    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, s in enumerate(src) if marker in s)


def run_steps(rec, fn, inputs):
    for i, x in enumerate(inputs):
        rec.set_step(i)
        fn(x)
    rec.set_step(-1)


# -- recompiles ------------------------------------------------------------------------
class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x).relu().sum()


def test_autocast_outside_compiled_module_recompiles_with_global_state_reason(rec):
    model = Tiny()
    compiled = torch.compile(model, backend="aot_eager")
    x = torch.randn(4, 8)
    rec.start_run()
    rec.set_step(0)
    compiled(x).backward()                                   # call site: frame of the compile
    rec.set_step(1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        compiled(x).backward()
    rec.set_step(-1)
    out = rec.finish_run(rank=0)
    df, counts = table(out), out["counts"]
    assert counts["compiles"] == 2 and counts["recompiles"] == 1
    re_row = df[df.kind == "recompile"].iloc[0]
    # torch 2.13: "0/0: GLOBAL_STATE changed: autocast(cpu)_enabled " (trailing space)
    assert "GLOBAL_STATE changed: autocast(cpu)_enabled" in re_row.reason
    assert re_row.step == 1 and re_row.compile_id.endswith("/1")
    first = df[df.kind == "compile"].iloc[0]
    assert first["name"] == "forward"
    assert first.frame == f"{__file__}:{line_of(Tiny, 'def forward')}"
    assert first.ops > 0 and first.guards > 0 and first.step == 0
    times = counts["compile_times"][first.compile_id]
    assert times["total_ms"] > 0 and times["bwd_ms"] > 0   # lazy backward folded in
    assert (df["rank"] == 0).all()


def test_lazy_backward_compile_is_its_own_row_and_counts_in_compile_seconds(rec):
    # AOTAutograd compiles the backward at the first .backward(), after the forward's
    # compile ended: a row of its own at that time (the timeline draws it there), counted
    # in compile_s. On H200 a max-autotune DDP first step took 204 s, its forward 50.6.
    compiled = torch.compile(Tiny(), backend="aot_eager")
    rec.start_run()
    rec.set_step(0)
    loss = compiled(torch.randn(4, 8))
    t_backward = time.time_ns()
    loss.backward()
    rec.set_step(-1)
    out = rec.finish_run(rank=0)
    df = table(out)
    assert df["kind"].tolist() == ["compile", "backward_compile"]
    fwd, bwd = df.iloc[0], df.iloc[1]
    assert bwd["name"] == fwd["name"] == "forward" and bwd.frame == fwd.frame
    assert bwd.compile_id == fwd.compile_id and bwd.step == 0
    assert bwd.ts_ns >= t_backward >= fwd.ts_ns + fwd.dur_ns and bwd.dur_ns > 0
    assert out["counts"]["compiles"] == 1 and out["counts"]["graphs"] == 1
    assert out["counts"]["compile_s"] == pytest.approx((fwd.dur_ns + bwd.dur_ns) / 1e9, rel=1e-3)


def test_compiled_library_module_is_named_by_its_call_site(rec):
    # Sequential.forward lives in torch (skipped), so Dynamo compiles a torch-internal
    # wrapper (`inner` in torch/_dynamo/external_utils.py); we point at the user's call
    seq = torch.compile(torch.nn.Sequential(torch.nn.Linear(4, 4)), backend="eager")
    rec.start_run()
    seq(torch.randn(2, 4))                                   # CALL-SITE
    row = table(rec.finish_run(0)).iloc[0]
    assert row["name"] == "<torch.compile(module)>"
    assert row.frame == f"{__file__}:{line_of(test_compiled_library_module_is_named_by_its_call_site, 'CALL-SITE')}"


def _lengths_8_to_28(rec, dynamic, rank):
    """f on lengths 8, 12, ..., 28, one per step, with recompile_limit 4."""
    def f(x):
        return (x * 2).cos()

    compiled = torch.compile(f, backend="eager", dynamic=dynamic)
    rec.start_run()
    with torch._dynamo.config.patch(recompile_limit=4):
        run_steps(rec, compiled, [torch.randn(n) for n in (8, 12, 16, 20, 24, 28)])
    return rec.finish_run(rank=rank)


def test_static_shapes_recompile_per_length_until_the_limit(rec):
    out = _lengths_8_to_28(rec, dynamic=False, rank=3)
    df, counts = table(out), out["counts"]
    assert counts["compiles"] == 4 and counts["recompiles"] == 3
    assert counts["limit_hit"] is True
    recs = df[df.kind == "recompile"]
    assert list(recs.step) == [1, 2, 3]
    # every guard failure, not only CompilationMetrics.recompile_reason (the first)
    third = recs.iloc[2].reason.split("; ")
    assert len(third) == 3
    assert "tensor 'x' size mismatch at index 0. expected 16, actual 20" in third[0]
    assert "expected 8, actual 20" in third[2]
    limit = df[df.kind == "limit_hit"].iloc[0]
    assert limit["name"] == "f" and limit.step == 4
    assert "recompile_limit (4)" in limit.reason and limit.reason.count("size mismatch") == 4
    assert (df["rank"] == 3).all()


def test_automatic_dynamic_compiles_at_most_twice(rec):
    counts = _lengths_8_to_28(rec, dynamic=None, rank=0)["counts"]
    assert counts["compiles"] <= 2 and counts["recompiles"] <= 1
    assert counts["limit_hit"] is False


# -- graph breaks -----------------------------------------------------------------------
def breaks(x):
    y = x * 2
    if y.sum() > 0:                                    # BREAK-1: data-dependent branch
        y = y + 1
    print("graph break here")                          # BREAK-2: print
    return y.cos()


def test_graph_breaks_carry_the_user_source_line(rec, capsys):
    compiled = torch.compile(breaks, backend="eager")
    rec.start_run()
    run_steps(rec, compiled, [torch.ones(4)])
    out = rec.finish_run(0)
    df = table(out)
    gb = df[df.kind == "graph_break"]
    frames = set(gb.frame)
    assert f"{__file__}:{line_of(breaks, 'BREAK-1')}" in frames
    assert f"{__file__}:{line_of(breaks, 'BREAK-2')}" in frames
    reasons = " | ".join(gb.reason)
    assert "Data-dependent branching" in reasons
    assert "print" in reasons
    assert set(gb["name"]) >= {"breaks"}
    assert out["counts"]["graph_breaks"] == len(gb) >= 2
    assert out["counts"]["graphs"] >= 2


# -- hooks survive resets, stay quiet, cost nothing idle ------------------------------
def test_reset_then_install_keeps_recording(rec):
    from torch._dynamo.callback import callback_handler

    for round_ in range(2):
        torch.compiler.reset()
        assert rec._on_start not in callback_handler.start_callbacks  # reset cleared them
        rec.install()
        rec.install()                                                 # idempotent
        assert callback_handler.start_callbacks.count(rec._on_start) == 1
        if round_ == 1:
            # what torch._logging.set_logs / _init_logs does to artifact loggers (calling it
            # here would bind torch's stderr handlers to pytest's capture stream)
            torch._logging._internal.log_state.artifact_names.discard("recompiles")
            for name in ("torch._dynamo.guards.__recompiles",
                         "torch._dynamo.symbolic_convert.__graph_breaks"):
                logging.getLogger(name).setLevel(logging.NOTSET)
                logging.getLogger(name).propagate = True
        rec.start_run()                                               # re-installs
        compiled = torch.compile(breaks, backend="eager", dynamic=False)
        run_steps(rec, compiled, [torch.ones(4), torch.ones(6), torch.ones(8)])
        out = rec.finish_run(0)
        reasons = list(table(out).query("kind == 'recompile' and name == 'breaks'").reason)
        assert "expected 4, actual 6" in reasons[0], round_
        # both guard failures: only the recompiles log has more than the first
        assert "expected 6, actual 8" in reasons[1] and "expected 4, actual 8" in reasons[1]


def test_no_extra_stderr_for_debug_artifacts(rec, capfd):
    if "TORCH_LOGS" in os.environ:
        pytest.skip("TORCH_LOGS asks for output")
    compiled = torch.compile(breaks, backend="eager", dynamic=False)
    rec.start_run()
    run_steps(rec, compiled, [torch.ones(4), torch.ones(5)])
    counts = rec.finish_run(0)["counts"]
    assert counts["recompiles"] >= 1 and counts["graph_breaks"] >= 1
    err = capfd.readouterr().err
    assert "Recompiling function" not in err and "Graph break" not in err


def test_nothing_compiled_means_no_events(rec):
    def f(x):
        return x + 1

    compiled = torch.compile(f, backend="eager")
    compiled(torch.ones(3))                      # warm, before the run
    rec.start_run()
    run_steps(rec, compiled, [torch.ones(3)] * 20)
    run_steps(rec, f, [torch.ones(3)] * 20)      # eager
    out = rec.finish_run(1)
    assert len(table(out)) == 0
    c = out["counts"]
    assert (c["compiles"], c["recompiles"], c["graph_breaks"], c["graphs"], c["limit_hit"]) \
        == (0, 0, 0, 0, False)
    assert c["signature"] == [] and c["recorder_errors"] == 0


def test_the_client_signature_is_the_one_the_engine_reported(rec):
    """One signature: the hash compile_signatures computes from a run's compile events is
    the hash in the engine's counts (what the divergence flag compares)."""
    from nbtools.analysis.counts import compile_signatures
    from nbtools.results.run import Run
    compiled = torch.compile(breaks, backend="eager", dynamic=False)
    rec.start_run()
    run_steps(rec, compiled, [torch.ones(4), torch.ones(5)])     # breaks, then a recompile
    out = rec.finish_run(0)
    run = Run(config=None, compile_events=table(out), summary=pd.DataFrame({"rank": [0]}))
    sig = compile_signatures(run)
    kinds = {k for k, *_ in out["counts"]["signature"]}
    assert {"graph_break", "recompile"} <= kinds, out["counts"]["signature"]
    assert sig["events"].tolist() == [len(out["counts"]["signature"])]
    assert sig["signature"].tolist() == [out["counts"]["signature_hash"]]


# -- inductor ------------------------------------------------------------------------
def test_inductor_compile_reports_cache_and_time_split(rec, tmp_path, monkeypatch):
    # an empty cache folder of its own: a miss for certain, whatever ran on this machine before
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))

    def f(x):
        return torch.nn.functional.gelu(x) * 3

    compiled = torch.compile(f, backend="inductor")
    rec.start_run()
    run_steps(rec, compiled, [torch.randn(16)])
    out = rec.finish_run(0)
    row = table(out).query("kind == 'compile'").iloc[0]
    assert row.cache == "miss" and row.ops >= 2 and row.graphs == 1
    t = out["counts"]["compile_times"][row.compile_id]
    assert t["total_ms"] >= t["backend_ms"] >= t["inductor_ms"] > 0


# -- divergence (pure) -------------------------------------------------------------------
def counts(**kw):
    base = dict(compiles=2, recompiles=1, graph_breaks=0, graphs=2, cudagraph_skips=0,
                limit_hit=False, signature=[["compile", "f", 3, 8], ["recompile", "f", 3, 8]])
    base.update(kw)
    return base


def test_divergence_names_the_first_difference():
    assert divergence({0: counts(), 1: counts()}) is None
    assert divergence({0: counts()}) is None
    msg = divergence({0: counts(), 1: counts(recompiles=3, compiles=4)})
    assert msg == "rank 1 recompiled 3 time(s), rank 0 1"
    assert divergence({0: counts(), 1: counts(), 2: counts(limit_hit=True)}) == \
        "rank 2 hit the recompile limit, rank 0 did not"
    graphs = divergence({0: counts(), 1: counts(signature=[["compile", "f", 3, 8],
                                                           ["recompile", "f", 5, 8]])})
    assert "different graphs" in graphs and "rank 1 traced 5 ops, rank 0 3" in graphs
    guards = divergence({0: counts(), 1: counts(signature=[["compile", "f", 3, 9],
                                                           ["recompile", "f", 3, 8]])})
    assert "different guards" in guards and "rank 1 has 9, rank 0 8" in guards


def test_divergence_is_importable_without_torch():
    import subprocess
    import sys
    code = ("import sys; from nbtools.engine.compile_recorder import divergence; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


# -- explain in a subprocess, TORCH_TRACE ------------------------------------------------
def test_explain_runs_elsewhere_and_keeps_compiled_state(rec):
    from nbtools.engine.explain import explain
    compiled = torch.compile(breaks, backend="eager")
    compiled(torch.ones(4))
    rec.start_run()
    info = explain(breaks, torch.ones(4))
    compiled(torch.ones(4))                      # still compiled here: nothing new
    assert rec.finish_run(0)["counts"]["compiles"] == 0
    assert info["graph_count"] >= 2 and info["graph_break_count"] >= 1
    frames = {b["frame"] for b in info["break_reasons"]}
    assert f"{__file__}:{line_of(breaks, 'BREAK-1')}" in frames


def test_torch_trace_dir_writes_a_trace_per_rank(rec, tmp_path):
    from nbtools.engine.torch_trace import torch_trace_dir
    try:
        path = torch_trace_dir(2, str(tmp_path))
        torch.compile(lambda x: x.cos(), backend="eager")(torch.ones(2))
        files = os.listdir(path)
        assert path.endswith("rank_2") and files
        assert os.path.getsize(os.path.join(path, files[0])) > 0
    finally:
        torch_trace_dir(2, None)
