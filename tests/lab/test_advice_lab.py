"""lab.advise on real runs of a 2-rank gloo lab: each rule with a run that plants its
problem (and the suggestion names the measured numbers) and a run without it (no
suggestion from that rule; a clean run gets none at all). Backend aot_eager: inductor's C++
compile takes minutes on these cores. The rules themselves: nbtools/analysis/advice/."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from nbtools import StepConfig
from nbtools.analysis.advice import NOTHING, Suggestions, compile_rules, gpu_rules

from support.lab_steps import adam, break_line, many_small_layers, small_batch, step_with_break

pytestmark = pytest.mark.slow

FAST = dict(warmup=1, steps=3, profiled=1)
COMPILED = dict(compile="default", backend="aot_eager", **FAST)


LAB = "shared"     # the worker's lab (tests/conftest.py): history counted from here


def rules(suggestions):
    print(suggestions)   # with -s: what a person reads
    return [s.rule for s in suggestions]


def _names(module) -> set[str]:
    return set(re.findall(r'rule="([a-z-]+)"', Path(module.__file__).read_text()))


# The rules that read what was compiled (recompiles, guards, breaks): the same on any host.
# The others weigh a share of the step's measured time, which a busy host moves (a clean
# run's optimizer crossed cpu-optimizer's line at 24 % under load): a test of a compile
# finding asserts on these alone, and on the timed rule it plants, by name.
COMPILE_TIME = _names(compile_rules) | _names(gpu_rules)


def compiled(suggestions):
    """rules(), the compile-time ones only, in their order."""
    return [r for r in rules(suggestions) if r in COMPILE_TIME]


def first(suggestions, rule):
    return next(s for s in suggestions if s.rule == rule)


def _blocks_step(ctx, read_index=True):
    """Ten blocks of one class, each compiled on its own (per-block compile), each with
    its layer_idx; forward reads it when ``read_index`` (as HF's attention does with its
    KV cache): one frame, one guard per index, the recompile limit (8) hit."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self, i):
            super().__init__()
            self.layer_idx = i
            self.lin = torch.nn.Linear(16, 16)

        def forward(self, x):
            y = self.lin(x).relu()
            if read_index and self.layer_idx == 0:   # the first layer does something else
                y = y * 2
            return y

    if "blocks" not in ctx.state:
        torch.manual_seed(0)
        ctx.state["blocks"] = [ctx.compile(Block(i)) for i in range(10)]
    x = torch.randn(4, 16)
    with torch.no_grad():
        for b in ctx.state["blocks"]:
            x = b(x)
    return x.sum()


def blocks_reading_index(ctx):
    return _blocks_step(ctx, True)


def blocks_not_reading_index(ctx):
    return _blocks_step(ctx, False)


def test_changing_lengths_under_static_shapes_suggest_mark_and_the_fix_is_silent(lab):
    cfg = StepConfig(scenario="varlen-train", dynamic="static", **COMPILED)
    run = lab.run(cfg)
    advice = lab.advise(run)
    assert isinstance(advice, Suggestions) and compiled(advice)[0] == "recompile-shapes"
    s = first(advice, "recompile-shapes")
    assert s.change == {"dynamic": "mark"} and s.rank == 1
    rec = run.compile_events[run.compile_events.kind == "recompile"]
    assert f"{rec.groupby('rank').size().max()} recompile(s)" in s.evidence
    assert "at index 1" in s.evidence and "mark_dynamic(tokens, 1)" in s.code   # the sequence dim
    assert 0 < s.score <= 1
    cfg.replace(**s.change)                      # a valid config ...
    fixed = lab.run(cfg.replace(**s.change))     # ... that no longer recompiles per length
    assert "recompile-shapes" not in rules(lab.advise(fixed))
    same = lab.run(cfg.replace(seq_schedule="fixed"))   # one length: nothing to say
    assert compiled(lab.advise(same)) == []


def test_a_per_block_layer_idx_guard_names_the_attribute_and_the_limit(lab):
    run = lab.run(blocks_reading_index, StepConfig(**COMPILED))
    advice = lab.advise(run)
    got = compiled(advice)
    # the limit was hit by the recompiles this fix removes: one suggestion (issue 43.6)
    assert got[:1] == ["module-int-guard"] and "recompile-limit" not in got, got
    s = first(advice, "module-int-guard")
    assert s.change == {} and "use_cache = False" in s.code
    assert s.model_patch == {}       # not an HF model: no config.use_cache to try for them
    assert "self.layer_idx" in s.evidence and "0, 1, 2, 3, 4, 5, 6, 7" in s.evidence
    assert "recompile limit" in s.evidence
    assert "allow_unspec_int_on_nn_module" in s.code
    # run again: its graphs are the first run's (nothing recompiles), so its own tables are
    # silent and lab.advise brings the first run's findings, saying where they were seen
    again = lab.run(blocks_reading_index, StepConfig(**COMPILED))
    assert again.compiled_by == run.run_id and run.compiled_by is None
    assert compiled(again.advise()) == []
    warm = lab.advise(again)
    assert compiled(warm) == ["module-int-guard"]
    assert first(warm, "module-int-guard").evidence.startswith(
        f"in run #{run.run_id}, which compiled the graphs")
    clean = lab.run(blocks_not_reading_index, StepConfig(**COMPILED))
    said = lab.advise(clean)
    assert compiled(said) == []
    assert said or str(said) == NOTHING       # a busy host's timed rule aside: nothing to say
    # lab.explore after it keeps a change: the queued suggestions the new best's run no
    # longer shows are recorded as gone, not tried (the GPU Llama's recompile-limit row
    # after use_cache=False was kept); those it still shows stay queued
    from nbtools.lab.ab_options import ABOptions
    from nbtools.lab.explore import _Candidate, _Explorer
    from nbtools.lab.explore_budget import Budget
    from nbtools.results.exploration import GONE, Exploration, new_row
    ex = Exploration(start=StepConfig(**COMPILED), best=StepConfig(**COMPILED))
    x = _Explorer(lab, ex, ABOptions(rounds=2), Budget(None))
    cands = [_Candidate(s, dict(s.change), {}, new_row(s, dict(s.change), {})) for s in advice
             if s.rule in COMPILE_TIME]
    cands.append(_Candidate(None, {"dynamic": "dynamic"}, {},
                            new_row(None, {"dynamic": "dynamic"}, {})))
    queue = [(c.s, c.change) for c in cands]
    assert x.still_shown(lab.advise(again), cands, "x") == queue and ex.rows == []
    assert x.still_shown(lab.advise(clean), cands, "the fix") == queue[-1:]
    assert [r["rule"] for r in ex.rows] == compiled(advice)
    assert all(r["outcome"] == f"{GONE} the fix" and not r["kept"] for r in ex.rows)


def test_a_graph_break_is_named_by_its_line_and_a_clean_step_gets_nothing(lab):
    run = lab.run(step_with_break, StepConfig(**COMPILED))
    advice = lab.advise(run)
    assert compiled(advice) == ["graph-breaks"]
    s = first(advice, "graph-breaks")
    assert f":{break_line()}" in s.evidence and "print" in s.evidence.lower()
    # one line, once per rank: not every (frame, reason) pair of the categorical columns
    assert s.evidence.startswith("1 graph break(s) on a rank at 1 line(s)")
    assert s.change == {} and "fullgraph=True" in s.code and "print" in s.code
    html = advice._repr_html_()
    assert f":{break_line()}" in html and "<table>" in html


def test_compile_outside_ddp_suggests_compile_inside_which_is_silent(lab):
    cfg = StepConfig(scenario="ddp-train", ddp_wrap="compile-outside", **COMPILED)
    run = lab.run(cfg)
    advice = lab.advise(run)
    assert compiled(advice)[0] == "ddp-compile-outside"
    assert first(advice, "ddp-compile-outside").change == {"ddp_wrap": "compile-inside"}
    assert "graph-breaks" not in rules(advice)     # DDP's own break is this rule's
    inside = lab.run(cfg.replace(ddp_wrap="compile-inside"))
    assert "ddp-compile-outside" not in rules(lab.advise(inside))


def _autocast_step(ctx, every_step):
    import torch
    if "f" not in ctx.state:
        ctx.state["f"] = ctx.compile(lambda x: (x @ x).relu().sum())
    x = torch.randn(16, 16)
    if every_step or ctx.step % 2:      # autocast outside the compiled code, some calls only
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return ctx.state["f"](x).float()
    return ctx.state["f"](x)


def autocast_some_steps(ctx):
    return _autocast_step(ctx, False)


def autocast_every_step(ctx):
    return _autocast_step(ctx, True)


def test_autocast_entered_on_some_calls_only_names_the_global_state(lab):
    run = lab.run(autocast_some_steps, StepConfig(**COMPILED))
    advice = lab.advise(run)
    assert compiled(advice) == ["global-state"]
    s = first(advice, "global-state")
    assert "autocast(cpu)_enabled changed" in s.evidence and s.change == {}
    assert "with torch.autocast" in s.code
    same = lab.run(autocast_every_step, StepConfig(**COMPILED))
    assert compiled(lab.advise(same)) == []


def test_fsdp2_exposed_communication_on_gloo(lab):
    run = lab.run(StepConfig(scenario="fsdp2-train", **FAST))
    sm = run.summary
    share = (sm["exposed_comm_ms"] / sm["profiled_window_ms"]).max()
    print(sm[["rank", "exposed_comm_ms", "comm_ms", "profiled_window_ms", "overlap_pct"]])
    got = [s for s in lab.advise(run) if s.rule == "fsdp-reshard"]
    assert bool(got) == (share >= 0.10)
    assert got, f"exposed share {share:.1%}: not planted on these cores"
    assert got[0].change == {"reshard_after_forward": False}
    kept = lab.run(StepConfig(scenario="fsdp2-train", reshard_after_forward=False, **FAST))
    assert "fsdp-reshard" not in rules(lab.advise(kept))


def _sleepy(ctx):
    import time

    import torch
    import torch.distributed as dist
    t = torch.ones(64)
    if ctx.rank == 0:
        time.sleep(0.02)   # rank 0's host is late to every all-reduce
    dist.all_reduce(t, group=ctx.group)
    return t.sum()


def test_a_rank_sleeping_before_each_all_reduce_is_named_host_side(lab):
    run = lab.run(_sleepy, StepConfig(capture="full", warmup=1, steps=2, profiled=12))
    advice = lab.advise(run)
    # planted: rank 0's 20 ms sleep; nothing compiled, so no compile finding either
    assert "straggler" in rules(advice) and compiled(advice) == []
    s = first(advice, "straggler")
    assert s.ranks == (0,) and "host-side" in s.title and s.change == {}
    assert s.evidence.startswith("rank 0 launched the all-reduces late")


def _two_linears():
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(2))

        def forward(self, x):
            for lin in self.layers:
                x = torch.relu(lin(x))
            return x
    return Net()


def _batch(step, device):
    import torch
    return torch.randn(8, 32, device=device), torch.zeros(8, 32, device=device)


def test_fsdp2_code_shards_what_the_lab_sharded_blocks_or_one_unit(lab):
    """A Workload without blocks= is sharded by FSDP2 as one unit: the advice's and the
    exploration's code then say fully_shard(model) alone, not a loop over model.layers the
    person's model may not have (it did, whatever the model)."""
    import torch

    from nbtools import Workload
    from nbtools.config.engine_notes import sharded_whole
    from nbtools.config.script_code import script_code
    cfg = StepConfig(scenario="custom", parallel="fsdp2", **FAST)
    mse = torch.nn.functional.mse_loss
    whole = lab.run(Workload(model=_two_linears, batch=_batch, loss=mse), cfg)
    per_block = lab.run(Workload(model=_two_linears, batch=_batch, loss=mse,
                                 blocks=lambda m: m.layers), cfg)
    assert whole.ok and per_block.ok
    assert sharded_whole(whole) and not sharded_whole(per_block)
    one = script_code(cfg, blocks=False)
    assert "for block" not in one and "fully_shard(model, reshard_after_forward=True)" in one
    compile(one, "<code>", "exec")
    many = script_code(cfg)
    assert "for block in model.layers:   # your model's repeated blocks" in many
    shown = 0
    for run, loop in ((whole, False), (per_block, True)):
        for s in lab.advise(run):
            if "fully_shard" in (s.code or ""):
                assert ("for block" in s.code) == loop, s.code
                shown += 1
    assert shown, "no FSDP2 advice with code on these runs: nothing checked"


def test_a_cpu_ranks_why_says_where_its_step_went(lab):
    """On gloo there is no GPU to wait for: why() splits each rank's profiled step by the
    causes the GPU's host wait uses (it said only "operator time on the cores")."""
    from nbtools.analysis.idle import HOST_COLUMNS, cpu_step_split
    run = lab.run(StepConfig(scenario="ddp-train", **FAST))
    split = cpu_step_split(run.events)
    assert sorted(split["rank"].unique()) == [0, 1]
    assert (split[list(HOST_COLUMNS)].sum(axis=1) - split["step_ms"]).abs().max() < 1e-6
    # a DDP training step: forward, backward and the optimizer each took a part
    assert (split[["host_forward_ms", "host_autograd_ms", "host_optimizer_ms"]] > 0).to_numpy().all()
    for d in run.why():
        assert d.bound == "cpu" and "went to" in d.text and "autograd's backward" in d.text, \
            d.text


def test_a_cpu_step_held_by_its_optimizer_gets_fused_where_fused_can_run(lab):
    """80 small parameter tensors under Adam on a CPU rank: the optimizer is most of the
    step, and fused=True (torch's fused CPU Adam) is the move; under FSDP2 with SGD, whose
    fused kernel DTensor cannot run (it failed on these ranks: 'does not have a sharding
    strategy registered'), fused is not proposed, and the list says why."""
    import torch

    from nbtools import Workload
    from nbtools.config.engine_notes import optimizer_name
    wl = Workload(model=many_small_layers, batch=small_batch,
                  loss=torch.nn.functional.mse_loss, optimizer=adam, name="many small layers")
    cfg = StepConfig(scenario="custom", parallel="ddp", **FAST)
    run = lab.run(wl, cfg)
    assert optimizer_name(run) == "Adam"
    got = [s for s in lab.advise(run) if s.rule == "cpu-optimizer"]
    assert got and got[0].change == {"optimizer_impl": "fused"}, [d.text for d in run.why()]
    assert "torch.optim.Adam(model.parameters(), lr=lr, fused=True)" in got[0].code
    fused = lab.run(wl, cfg.replace(**got[0].change))      # the move runs
    assert fused.ok and "cpu-optimizer" not in rules(lab.advise(fused))
    # the same model under FSDP2 with SGD (the lab's default optimizer)
    sharded = Workload(model=many_small_layers, batch=small_batch,
                       loss=torch.nn.functional.mse_loss, name="many small layers, SGD")
    sgd = lab.run(sharded, cfg.replace(parallel="fsdp2"))
    assert optimizer_name(sgd) == "SGD"
    adv = lab.advise(sgd)
    assert not any(s.change.get("optimizer_impl") == "fused" for s in adv), adv
    said = dict(adv.not_proposed)
    assert "no DTensor sharding rule" in said.get("optimizer_impl='fused'", ""), \
        (adv.not_proposed, [d.text for d in sgd.why()])
    assert "optimizer_impl='fused'" in str(adv)          # printed with the list
    with pytest.raises(Exception, match="sharding strategy"):
        lab.run(StepConfig(scenario="fsdp2-train", optimizer_impl="fused", **FAST))
