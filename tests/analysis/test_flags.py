"""Every flag (nbtools/analysis/flags.py) on 2 CPU ranks through real engines and gloo: it fires for
its reason, and stays silent where that reason is absent (a run-only change after a
compiled run, cache='continue', a custom step). The pure straggler attribution is also
checked on hand-built events, where the truth is known exactly."""
import re

import numpy as np
import pandas as pd
import pytest

from nbtools import StepConfig, export_html, load_traces
from nbtools.analysis import flags as F
from nbtools.ui.html import summary_html
from nbtools.analysis.straggler import attribute, verdict_text

from support.lab_steps import break_line, step_with_break
from support.paths import FIXTURES, H200, ROOT

FAST = dict(warmup=1, steps=2, profiled=1)
SLEEP_S = 0.02
COMPILE_FLAGS = {"ran-eagerly", "ddp-graph-breaks", "graph-breaks", "recompiles",
                 "divergent-ranks"}


# the conftest lab, with what this module needs beside its defaults
LAB = dict(timeout=300, pg_timeout=300, echo=False)


def ids(run):
    print(*run.flags, sep="\n")   # with -s: the examples docs/flags.md quotes
    found = [F.identify(f) for f in run.flags]
    assert None not in found, ("a flag not in the registry", run.flags)
    return found


def flagged(run, flag_id):
    return [f for f, i in zip(run.flags, ids(run)) if i == flag_id]


def states(run):
    return [run.ranks[r]["compile_outcome"]["state"] for r in (0, 1)]


# -- custom steps (run on the engines) -------------------------------------------------
def _no_compile(ctx):
    import torch
    return torch.ones(4).sum()


def _compiled(ctx):
    import torch
    return ctx.compile(lambda x: (x * 2).sin().sum())(torch.ones(8))


def _two_shapes(ctx):
    import torch
    return ctx.compile(lambda x: (x * 2).sum())(torch.ones(8 + ctx.step % 2))


def _rank_dependent(ctx):
    import torch
    n = 8 if ctx.rank == 0 else 8 + ctx.step   # rank 1 sees a new shape every step
    return ctx.compile(lambda x: (x * 2).sum())(torch.ones(n))


def _compile_aware(ctx):
    import torch
    # traced: is_compiling() is True, so the compiled code doubles; eager does not
    return ctx.compile(lambda x: x * (2 if torch.compiler.is_compiling() else 1))(
        torch.ones(4)).sum()


def _sleepy(ctx):
    import time

    import torch
    import torch.distributed as dist
    t = torch.ones(64)
    if ctx.rank == 0:
        time.sleep(0.02)   # SLEEP_S: the host is late, the CPU has nothing to do
    dist.all_reduce(t, group=ctx.group)
    return t.sum()


def _heavy(ctx):
    import torch
    import torch.distributed as dist
    # 512: tens of ms more a step on rank 0, beyond what a second test worker's load on the
    # same 2 cores makes a rank wait for the CPU (256, a few ms, was lost in it)
    a = torch.ones(512, 512)
    if ctx.rank == 0:
        for _ in range(12):   # rank 0 computes longer before the collective
            a = torch.mm(a, a) / 512
    dist.all_reduce(a[0], group=ctx.group)
    return a.sum()


def _balanced(ctx):
    import time

    import torch
    import torch.distributed as dist
    t = torch.ones(64)
    time.sleep(0.03)   # long against scheduling noise: 20 % of it is 6 ms
    dist.all_reduce(t, group=ctx.group)
    return t.sum()


def _independent(ctx):
    import time

    import torch
    time.sleep(0.02 if ctx.rank == 0 else 0.002)   # no collective: nobody waits
    return torch.ones(4).sum()


# -- compile outcome: ran-eagerly --------------------------------------------------------
def test_ran_eagerly_fires_when_compile_is_on_and_nothing_compiled_or_ran(lab):
    run = lab.run(_no_compile, StepConfig(compile="default", backend="eager", **FAST))
    assert run.ok, run.errors
    assert "ran-eagerly" in ids(run), run.flags
    assert states(run) == ["eager", "eager"]
    assert (run.summary["compile_state"] == "eager").all()


def test_ran_eagerly_silent_when_compiled_state_is_reused(lab):
    base = StepConfig(scenario="tp-mlp-infer", compile="default", backend="eager",
                      dynamic="static", **FAST)
    first = lab.run(base)
    assert states(first) == ["compiled", "compiled"] and "ran-eagerly" not in ids(first)
    # only run-length/capture fields change: the engine reuses the compiled model, compiles
    # nothing, and its compiled code runs
    for cfg in (base.replace(capture="light"), base.replace(capture="off"),
                base.replace(steps=3), base.replace(cache="continue", capture="light")):
        run = lab.run(cfg)
        assert run.ok, run.errors
        assert all(r["reused"] for r in run.ranks.values())
        assert (run.summary["graphs"] == 0).all()
        assert states(run) == ["reused", "reused"], cfg.label()
        # entries are counted over the warm-up steps only (engine/quiet.py keeps that Python
        # callback out of the timed ones): every warm-up step entered compiled code
        assert all(run.ranks[r]["compile_outcome"]["frames_run"] >= cfg.warmup for r in (0, 1))
        assert "ran-eagerly" not in ids(run), (cfg.label(), run.flags)


def test_ran_eagerly_silent_for_a_custom_step_that_compiles(lab):
    run = lab.run(_compiled, StepConfig(compile="default", backend="eager", **FAST))
    assert states(run) == ["compiled", "compiled"]
    assert not COMPILE_FLAGS & set(ids(run)), run.flags
    again = lab.run(_compiled, StepConfig(compile="default", backend="eager", capture="off",
                                          **{**FAST, "steps": 3}))
    assert states(again) == ["reused", "reused"]
    assert not COMPILE_FLAGS & set(ids(again)), again.flags


def test_ran_eagerly_names_compile_outside_ddp_and_compile_inside_is_silent(lab):
    ddp = StepConfig(scenario="ddp-train", compile="default", backend="eager", **FAST)
    outside = lab.run(ddp.replace(ddp_wrap="compile-outside"))
    assert outside.ok, outside.errors
    found = ids(outside)
    # which of the two it is depends on what Dynamo compiled after DDP's break
    assert {"ran-eagerly", "ddp-graph-breaks"} & set(found), outside.flags
    if "ran-eagerly" in found:
        assert any("torch.compile(DDP(model))" in f for f in outside.flags)
        assert set(states(outside)) == {"eager"}
    inside = lab.run(ddp)
    assert states(inside) == ["compiled", "compiled"]
    assert not {"ran-eagerly", "ddp-graph-breaks"} & set(ids(inside)), inside.flags


# -- graph breaks, recompiles, divergence --------------------------------------------------
def test_graph_breaks_flag_names_the_line_and_is_not_repeated_on_reuse(lab):
    run = lab.run(step_with_break, StepConfig(compile="default", backend="eager", **FAST))
    flag = flagged(run, "graph-breaks")
    assert len(flag) == 1, run.flags
    line = break_line()
    assert f":{line}" in flag[0] and "print" in flag[0], flag
    again = lab.run(step_with_break, StepConfig(compile="default", backend="eager",
                                            **{**FAST, "steps": 3}))
    assert states(again) == ["reused", "reused"]
    assert "graph-breaks" not in ids(again), again.flags


def test_recompiles_flag_gives_the_guard_failure_and_is_silent_when_reused(lab):
    cfg = StepConfig(compile="default", backend="eager", dynamic="static", **FAST)
    run = lab.run(_two_shapes, cfg)
    flag = flagged(run, "recompiles")
    assert flag and "size mismatch" in flag[0], run.flags
    assert "divergent-ranks" not in ids(run)
    # step 0 (warm-up) compiled shape 8, step 1 (measured) recompiled for shape 9
    timed = flagged(run, "compiled-in-timed")
    assert timed and timed[0].startswith("compiled inside 1 of 2 measured step(s) on rank(s) "
                                         "0, 1") and "step_ms times recompiles" in timed[0], \
        run.flags
    again = lab.run(_two_shapes, cfg.replace(steps=3))   # both shapes compiled already
    assert states(again) == ["reused", "reused"]
    assert "recompiles" not in ids(again), again.flags
    assert "compiled-in-timed" not in ids(again), again.flags


def _late_graph(ctx):
    import torch
    x = torch.ones(8)
    if ctx.step >= 2:       # a second function first called in the measured steps
        return ctx.compile(lambda t: (t * 3).cos().sum())(x)
    return ctx.compile(lambda t: (t * 2).sin().sum())(x)


def test_compiled_in_timed_names_a_first_compile_after_the_warm_up(lab):
    """A compile that lands in the measured steps makes step_ms time it: said, with how
    much of those steps it took; a warm-up that covers it is silent."""
    cfg = StepConfig(compile="default", backend="eager", warmup=1, steps=3, profiled=0)
    run = lab.run(_late_graph, cfg)
    timed = flagged(run, "compiled-in-timed")
    assert timed and timed[0].startswith("compiled inside 1 of 3 measured step(s)"), run.flags
    assert "first compiles (warm-up too short: raise warmup)" in timed[0], timed
    assert re.search(r"rank \d: [\d.]+ (ms|µs|s) of those steps' [\d.]+ (ms|s)", timed[0]), timed
    # another backend compiles afresh; a warm-up of 3 steps holds both first calls
    fresh = lab.run(_late_graph, cfg.replace(backend="aot_eager", warmup=3))
    assert (fresh.compile_events["kind"] == "compile").sum() >= 2 * 2, fresh.compile_events
    assert "compiled-in-timed" not in ids(fresh), fresh.flags
    said = lab.compare(run, fresh).caveats          # a verdict over it says so
    assert "1 of 2 runs with compiles inside their timed steps (see their flags)" in said, said


def test_divergent_ranks_fires_for_a_rank_on_another_path_only(lab):
    run = lab.run(_rank_dependent, StepConfig(compile="default", backend="eager",
                                              dynamic="static", warmup=3, steps=2, profiled=0))
    flag = flagged(run, "divergent-ranks")
    assert flag and "rank 1" in flag[0] and "rank 0" in flag[0], run.flags
    same = lab.run(_compiled, StepConfig(compile="default", backend="eager", **FAST))
    assert "divergent-ranks" not in ids(same), same.flags


# -- unused, check ----------------------------------------------------------------------
def test_unused_fires_for_a_setting_this_device_lacks(lab):
    run = lab.run(_no_compile, StepConfig(compile="reduce-overhead", **FAST))
    assert flagged(run, "unused") == [
        "unused: compile=reduce-overhead: inductor captures no CUDA graphs on CPU"], run.flags
    plain = lab.run(_no_compile, StepConfig(compile="off", **FAST))
    assert "unused" not in ids(plain) and states(plain) == ["off", "off"], plain.flags


def test_check_differs_fires_when_compiled_and_eager_disagree(lab):
    run = lab.run(_compile_aware, StepConfig(compile="default", backend="eager", check=True,
                                             **FAST))
    flag = flagged(run, "check-differs")
    assert len(flag) == 2 and "by 100 %" in flag[0], run.flags   # |2x - 1x| over 1x, each rank
    agree = lab.run(_compiled, StepConfig(compile="default", backend="eager", check=True,
                                          **FAST))
    assert "check-differs" not in ids(agree), agree.flags


# -- timing: straggler, step spread -----------------------------------------------------
def test_a_rank_sleeping_before_each_all_reduce_is_the_host_side_straggler(lab, tmp_path):
    run = lab.run(_sleepy, StepConfig(capture="full", warmup=1, steps=2, profiled=12))
    assert run.ok, run.errors
    flag = flagged(run, "straggler")
    assert len(flag) == 1, run.flags
    assert flag[0].startswith("straggler: rank 0 launched the all-reduces"), flag
    assert "host-side" in flag[0] and "rank 1 waited" in flag[0], flag
    assert "step-spread" not in ids(run)
    s = run.summary.set_index("rank")
    assert s.at[1, "wait_ms"] == pytest.approx(SLEEP_S * 1e3, rel=0.2), s["wait_ms"]
    assert s.at[0, "wait_ms"] < 0.2 * SLEEP_S * 1e3
    assert s.at[0, "last_pct"] >= 75
    # shown where a person reads the run: the panel's summary and the exported report
    assert "wait_ms" in summary_html(run)
    page = export_html(tmp_path / "r.html", [run]).read_text(encoding="utf-8")
    assert "rank 0 launched the all-reduces" in page and "wait_ms" in page


def test_a_rank_computing_longer_before_the_collective_is_the_compute_straggler(lab):
    # 12 profiled steps: one step where the loaded box lets rank 1 arrive last leaves
    # 11 of 12, still beyond chance (7 of 8 is not)
    run = lab.run(_heavy, StepConfig(capture="full", warmup=1, steps=2, profiled=12))
    flag = flagged(run, "straggler")
    assert len(flag) == 1, run.flags
    assert flag[0].startswith("straggler: rank 0 reached the all-reduces"), flag
    assert "slower compute" in flag[0], flag


def test_balanced_ranks_name_no_straggler(lab):
    run = lab.run(_balanced, StepConfig(capture="full", warmup=1, steps=2, profiled=8))
    assert not {"straggler", "step-spread"} & set(ids(run)), run.flags
    assert run.summary["wait_ms"].notna().all()


def test_five_identical_runs_give_one_straggler_verdict_or_none_resolved(lab):
    # on two busy CPU cores the last rank to arrive changes from run to run by luck: a
    # straggler is named only with evidence (late in most steps beyond the steps' noise), so
    # identical runs agree, or say that none is resolved
    texts = []
    for _ in range(5):
        run = lab.run(_balanced, StepConfig(capture="full", warmup=1, steps=2, profiled=8))
        assert run.ok, run.errors
        texts.append(verdict_text(attribute(run.events, run.steps)))
        named = flagged(run, "straggler")
        assert not named or named[0].startswith(f"straggler: {texts[-1]}"), (named, texts)
    ranks = {re.match(r"rank (\d+)", t).group(1) for t in texts if t.startswith("rank ")}
    assert len(ranks) <= 1, texts
    assert all(t.startswith(("no straggler resolved", "rank ")) for t in texts), texts


def test_step_spread_without_collectives_says_why_no_rank_is_named(lab):
    run = lab.run(_independent, StepConfig(capture="full", **FAST))
    flag = flagged(run, "step-spread")
    assert flag and "no collectives in the captured steps" in flag[0], run.flags
    blind = lab.run(_independent, StepConfig(capture="off", **FAST))
    flag = flagged(blind, "step-spread")
    assert flag and "capture='full' names it" in flag[0], blind.flags
    # with the collectives captured the waiting is attributed instead (the sleepy test)


# -- pure: the attribution on hand-built events --------------------------------------
def _events(late_rank, host_ms, compute_ms, n=8):
    """Two CPU ranks, one collective per step; ``late_rank`` arrives late by host_ms of
    idle plus compute_ms of extra ops."""
    rows = []
    t = 0
    for step in range(n):
        for r in (0, 1):
            extra = (host_ms + compute_ms) * 1e6 if r == late_rank else 0
            op = 1e6 + (compute_ms * 1e6 if r == late_rank else 0)
            rows.append((r, "cpu:1", "annotation", f"nbtools/step {step}", t, 10e6 + extra, step))
            rows.append((r, "cpu:1", "cpu_op", "aten::mm", t + 1e5, op, step))
            arrive = t + 2e6 + extra
            rows.append((r, "cpu:1", "communication", "c10d::allreduce_", arrive, 5e4, step))
            rows.append((r, "cpu:9", "communication", "gloo:all_reduce", arrive + 1e5,
                         t + 2e6 + (host_ms + compute_ms) * 1e6 + 3e5 - arrive, step))
        t += 20e6
    return pd.DataFrame(rows, columns=["rank", "lane", "category", "name", "ts_ns", "dur_ns",
                                       "step"]).astype({"ts_ns": np.int64, "dur_ns": np.int64})


def test_attribution_on_known_events():
    host = attribute(_events(1, host_ms=3, compute_ms=0))
    v = host["straggler"]
    assert v["rank"] == 1 and v["cause"] == "host" and v["late_ms"] == pytest.approx(3)
    assert host["per_rank"].set_index("rank").at[0, "wait_ms"] == pytest.approx(3)
    comp = attribute(_events(0, host_ms=0, compute_ms=4))["straggler"]
    assert comp["rank"] == 0 and comp["cause"] == "compute"
    assert comp["extra_compute_ms"] == pytest.approx(4)
    assert attribute(_events(0, host_ms=0, compute_ms=0))["straggler"] is None
    # one profiled step cannot tell a repeated lateness from a one-off
    assert attribute(_events(1, host_ms=3, compute_ms=0, n=1))["straggler"] is None
    assert attribute(_events(0, 0, 0).query("category != 'communication'")) is None


def _steps(scatter_ms, n=12, base_ms=20.0):
    """A steps table: n timed steps per rank, alternating base +/- scatter_ms."""
    rows = [(r, i, "measured", i * 30_000_000, int((base_ms + (scatter_ms if i % 2 else -scatter_ms)) * 1e6))
            for r in (0, 1) for i in range(n)]
    return pd.DataFrame(rows, columns=["rank", "step", "phase", "ts_ns", "dur_ns"])


def test_a_straggler_is_named_only_beyond_the_timed_steps_noise():
    """issue 34: on a busy 2-core CPU box every run named a straggler: 3 profiled steps gave
    a noise of 2.1 ms where the late rank's 13 timed steps spread 3.8 ms, and it was 4 ms
    late. The noise now takes the late rank's every timed step, and a lateness (one rank's
    arrival against another's, each jittering) must pass sqrt(2) times it."""
    ev = _events(1, host_ms=3, compute_ms=0)
    assert attribute(ev, _steps(0.5))["straggler"]["rank"] == 1      # 3 ms > 1.41 x 0.74 ms
    quiet = attribute(ev, _steps(2.5))                                 # 3 ms < 1.41 x 3.7 ms
    assert quiet["straggler"] is None
    assert verdict_text(quiet).startswith("no straggler resolved: the likeliest, rank 1")
    assert quiet["evidence"]["noise_ms"] == pytest.approx(2 ** 0.5 * 1.4826 * 2.5, rel=1e-3)


def test_host_busy_is_said_once_per_lab():
    from nbtools.analysis.machine import once_per_lab, oversubscribed
    busy = F.make("host-busy", load="3.8", host="vm", ranks="0, 1", others="1.2", cores="2")
    other = F.make("unused", what="x")
    said = set()
    assert once_per_lab([busy, other], said) == [busy, other]
    assert once_per_lab([busy, other], said) == [other]           # the next run: said already
    assert once_per_lab([other], set()) == [other]
    # the lab's own ranks: more threads than cores is said when the lab starts
    assert oversubscribed({"vm": (2, 1, 2)}) == []
    (note,) = oversubscribed({"vm": (4, 1, 2)})
    assert note.startswith("host busy: 4 ranks x 1 thread(s) share 2 core(s) on vm")


def _h200(mode):
    h200 = H200
    return load_traces([h200 / f"tp_{mode}_rank0.json.gz", h200 / f"tp_{mode}_rank1.json.gz"])


def test_h200_tp_eager_names_rank_0_host_side_and_cuda_graphs_none():
    """Real 2 x H200 traces (tp-mlp-infer batch 1, nbtools/data/h200): eager, rank 0
    reaches each of the 8 all-reduce kernels ~0.3 ms after rank 1 with the same 0.09 ms of
    kernels before them; under reduce-overhead the replayed graphs arrive together."""
    from nbtools.analysis.straggler import sentence
    att = attribute(_h200("off").events)
    v = att["straggler"]
    assert v["rank"] == 0 and v["cause"] == "host" and v["kind"] == "all-reduces", v
    assert att["collectives"] == 24 and v["share"] > 0.9
    waits = att["per_rank"].set_index("rank")["wait_ms"]
    assert waits[1] > 0.2 * v["step_ms"] > waits[0]
    assert sentence(v).startswith("rank 0 launched the all-reduces")
    graphs = attribute(_h200("reduce-overhead").events)
    assert graphs["collectives"] == 24 and graphs["straggler"] is None


def test_h200_batch256_names_the_rank_late_once_per_step_not_the_one_last_most_often():
    """2 x H200, tp-mlp-infer batch 256 (tests/fixtures/h200/tp_b256_events.parquet): rank 1
    reaches each step's first all-reduce ~1 ms after rank 0; at the other seven rank 0 is
    last by 2-4 us. Counting "last" named nobody (rank 0 last at 79 %, rank 1 barely waits);
    the straggler is the rank the others wait for, weighted by how long."""
    from nbtools.analysis.straggler import sentence
    ev = pd.read_parquet(FIXTURES / "h200" / "tp_b256_events.parquet")
    att = attribute(ev)
    v = att["straggler"]
    assert v is not None and v["rank"] == 1 and v["cause"] == "host", att
    assert 0.8 < v["late_ms"] < 1.3 and v["step_share"] == 1.0
    assert 0.8 < v["waits"][0] < 1.3
    assert sentence(v).startswith("rank 1 launched the all-reduces late")


# -- the registry and its page ------------------------------------------------------------
def test_every_flag_is_documented_with_a_printed_example():
    page = (ROOT / "docs" / "flags.md").read_text(encoding="utf-8")
    assert F.markdown_table() in page, "docs/flags.md: regenerate with python -m nbtools.analysis.flags"
    examples = re.findall(r"^> (.+)$", page, re.M)
    for f in F.REGISTRY:
        assert f"`{f.id}`" in page, f.id
        assert any(F.identify(e) == f.id for e in examples), f"no example of {f.id}"


# -- the engine's outcome, in this process (the recorder the engines use) ----------------
def test_outcome_tells_reused_graphs_from_frames_that_hold_none():
    import torch

    from nbtools.engine.compile_recorder import CompileRecorder
    from nbtools.analysis.compile_counts import outcome

    def only_a_break(x):
        torch._dynamo.graph_break()   # Dynamo keeps a cache entry for this frame, no graph
        return x

    def body(x):
        return (x * 2).sin()

    torch.compiler.reset()
    rec = CompileRecorder()
    try:
        runs = []
        for fn in (body, body, only_a_break):
            if fn is only_a_break:
                torch.compiler.reset()
            rec.start_run()
            f = torch.compile(fn, backend="eager")
            for _ in range(3):
                f(torch.ones(4))
            runs.append(outcome(rec.finish_run(0)["counts"], requested=True, reused=False))
    finally:
        rec.uninstall()
        torch.compiler.reset()
    first, second, broken = runs
    assert first["state"] == "compiled" and first["frames_run"] == 2
    assert second["state"] == "reused" and second["frames_run"] == 3, second
    # entries into a frame ran, but no graph: that is eager, not reuse
    assert broken["frames_run"] >= 2 and broken["graphs_cached"] == 0
    assert broken["state"] == "eager", broken
    assert outcome({"graphs": 0, "frames_run": 0}, requested=False, reused=False)["state"] == "off"
    from torch._C._dynamo.eval_frame import set_guard_complete_hook
    assert set_guard_complete_hook(None) is None   # uninstall put back what was there
