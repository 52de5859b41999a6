"""A user's own model through every toggle (nbtools.Workload) on 2 CPU ranks (real engines,
gloo): the strategy shows in the trace, check compares against eager, every combination the
lab cannot honour is a ConfigError before dispatch, and an edited step never runs stale."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from nbtools import ConfigError, StepConfig, Workload
from nbtools.claims.model_sweep import check_rel, collectives_per_step

FAST = dict(warmup=1, steps=1, profiled=1, check=True)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, d=32, n=2):
        super().__init__()
        self.layers = nn.ModuleList(Block(d) for _ in range(n))
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        for b in self.layers:
            x = b(x)
        return self.head(x)


def _batch(step, device):
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 32, generator=g), torch.randn(8, 1, generator=g)


NET = Workload(model=lambda: Net(), batch=_batch, loss=F.mse_loss, blocks=lambda m: m.layers,
               tp_plan={"layers.*.up": "colwise", "layers.*.down": "rowwise"},
               dynamic_dims=((0, 0),), items=8, flops=lambda m: 6.0 * 8 * sum(
                   p.numel() for p in m.parameters()), name="net")


# the conftest lab, with what this module needs beside its defaults
LAB = "shared"     # the worker's lab (tests/conftest.py): history counted from here


def _collectives(run) -> dict:
    """Collectives per profiled step on rank 0, by kind (0 for a kind that did not run), as
    the process group ran them; plus the c10d ops issued (gloo has no reduce-scatter: it runs
    FSDP2's c10d::_reduce_scatter_base_ as an all_reduce, so the op shows what FSDP2 asked)."""
    c = collectives_per_step(run)
    out = {k: float(c.get(k, 0.0)) for k in ("all_reduce", "all_gather", "reduce_scatter")}
    ev = run.events
    ops = ev[(ev["rank"] == 0) & ev["name"].str.startswith("c10d::")]["name"]
    out["reduce_scatter_op"] = int(ops.str.contains("reduce_scatter").sum())
    return out


def _assert_checked(run, tol):
    for r in (0, 1):
        c = run.ranks[r]["check"]
        assert c["finite"] and c["what"] == "loss", c
    assert check_rel(run) <= tol, (run.config.label(), run.ranks)


@pytest.mark.slow
@pytest.mark.parametrize("compile_", ["off", "default"])
def test_user_workload_under_each_strategy(lab, compile_):
    extra = dict(backend="aot_eager") if compile_ != "off" else {}
    seen = {}
    for par in ("none", "ddp", "fsdp2"):
        run = lab.run(NET, NET.config(parallel=par, compile=compile_, **extra, **FAST))
        assert run.ok and run.config.resolved_parallel == par
        _assert_checked(run, 1e-5)
        assert any("workload net" in n for n in run.ranks[0]["notes"])
        assert (run.summary["items_per_s"] > 0).all() and (run.summary["tflops"] > 0).all()
        if compile_ != "off":
            assert (run.compile_events.groupby("rank").size() >= 1).all()
        seen[par] = _collectives(run)
    assert seen["none"] == dict(all_reduce=0, all_gather=0, reduce_scatter=0,
                                reduce_scatter_op=0), seen
    assert seen["ddp"]["all_reduce"] > 0 and seen["ddp"]["all_gather"] == 0, seen
    assert seen["ddp"]["reduce_scatter_op"] == 0, seen
    # 2 blocks + the root: 3 parameter groups, gathered for forward and again for backward
    assert seen["fsdp2"]["all_gather"] == 6 and seen["fsdp2"]["reduce_scatter_op"] == 3, seen


@pytest.mark.slow
def test_user_workload_tensor_parallel(lab):
    run = lab.run(NET, parallel="tp", **FAST)
    assert run.ok
    _assert_checked(run, 1e-5)
    # each rank holds half of up (weight and bias, colwise) and of down's weight (rowwise);
    # the norms, down's bias and the head are replicated
    full = sum(p.numel() for p in Net().parameters())
    halved = 2 * (32 * 128 + 128 + 128 * 32) // 2
    assert any(f"workload net: {full - halved:,} parameters" in n for n in run.ranks[0]["notes"])
    assert _collectives(run)["all_reduce"] > 0           # the row-parallel outputs


# -- what the lab cannot honour: ConfigError on the client, nothing dispatched -----------------
NO_EXTRAS = Workload(model=lambda: Net(), batch=_batch, loss=F.mse_loss)
INFER = Workload(model=lambda: Net(), batch=_batch)


def _step(ctx):
    ctx.report(v=1)


@pytest.mark.parametrize("what, fields, match", [
    (NO_EXTRAS, dict(parallel="tp"), "tp_plan"),
    (NO_EXTRAS, dict(parallel="fsdp2", compile="default", backend="aot_eager"), "blocks"),
    (NO_EXTRAS, dict(compile="default", dynamic="mark"), "dynamic_dims"),
    (INFER, dict(autocast="bf16", autocast_scope="step"), "no loss"),
    (INFER, dict(parallel="ddp"), "no loss"),
    (INFER, dict(parallel="fsdp2", reshard_after_forward=False), "no loss"),
    (NET, dict(batch=4), "batch function decides the inputs; change it there, or give "
                         r"Workload\(batch_size=N\)"),
    (NET, dict(size="large"), "size"),
    (_step, dict(parallel="ddp"), "Workload"),
    (_step, dict(parallel="fsdp2", reshard_after_forward=False), "reshard_after_forward"),
    (_step, dict(parallel="ddp", compile="default", ddp_wrap="compile-outside"), "ddp_wrap"),
    (_step, dict(compile="default", dynamic="mark"), "dynamic='mark'"),
])
def test_unhonourable_combinations_fail_before_dispatch(lab, what, fields, match):
    before = len(lab.history)
    with pytest.raises(ConfigError, match=match):
        lab.run(what, StepConfig(scenario="custom", warmup=0, steps=1, profiled=0, **fields))
    assert len(lab.history) == before          # nothing ran


def test_check_on_a_step_that_returns_nothing_says_so(lab):
    from nbtools.results.errors import RunFailed
    with pytest.raises(RunFailed, match="check=True compares what the step returns"):
        lab.run(_step, StepConfig(scenario="custom", warmup=0, steps=1, profiled=0, check=True))


def test_workload_rejects_what_is_not_a_workload():
    with pytest.raises(ConfigError, match="model"):
        Workload(model=Net(), batch=_batch)
    with pytest.raises(ConfigError, match="colwise"):
        Workload(model=Net, batch=_batch, tp_plan={"up": "column"})
    with pytest.raises(ConfigError, match="dim"):
        Workload(model=Net, batch=_batch, dynamic_dims=(0, 1))
    with pytest.raises(ConfigError, match=r"takes the size: batch=lambda step, device, size"):
        Workload(model=Net, batch=_batch, batch_size=8)
    with pytest.raises(ConfigError, match="positive int"):
        Workload(model=Net, batch=_sized_batch, batch_size=-2)


def _sized_batch(step, device, size):
    g = torch.Generator().manual_seed(step)
    return torch.randn(size, 32, generator=g), torch.randn(size, 1, generator=g)


def test_a_workload_that_takes_its_size_runs_at_the_configs_batch(lab):
    """Workload(batch_size=N) with batch(step, device, size): StepConfig(batch=2N) runs at
    2N (the inputs' shape, items and items/s follow), the ranks report the size the advice's
    larger-batch suggestion doubles, and a Workload without it still refuses batch=."""
    wl = Workload(model=Net, batch=_sized_batch, loss=F.mse_loss, items=8, batch_size=8,
                  name="sized")
    cfg = wl.config(warmup=1, steps=2, profiled=0)
    own, twice = lab.run(wl, cfg), lab.run(wl, cfg.replace(batch=16))
    assert own.ok and twice.ok
    assert [own.ranks[r]["batch_size"] for r in own.ranks] == [8, 8]
    assert [twice.ranks[r]["batch_size"] for r in twice.ranks] == [16, 16]
    assert own.ranks[0]["shapes"] == "x0[8,32]" and twice.ranks[0]["shapes"] == "x0[16,32]"
    per_item = [float((r.summary["items_per_s"] * r.summary["step_ms"]).iloc[0])
                for r in (own, twice)]
    assert per_item[1] == pytest.approx(2 * per_item[0])    # items a step: 8 -> 16


# -- no stale code ---------------------------------------------------------------------------
FACTOR = 1


def _reads_global(ctx):
    ctx.report(v=FACTOR)


def _values(run):
    return sorted(set(run.reports["v"]))


def test_redefined_step_runs_its_new_definition(lab):
    cfg = StepConfig(scenario="custom", warmup=0, steps=1, profiled=0)

    def step(ctx):
        ctx.report(v=1)
    assert _values(lab.run(step, cfg)) == [1]

    def step(ctx):  # noqa: F811 - the redefinition is the test
        ctx.report(v=2)
    assert _values(lab.run(step, cfg)) == [2]


def test_a_changed_global_is_seen(lab):
    global FACTOR
    cfg = StepConfig(scenario="custom", warmup=0, steps=1, profiled=0)
    FACTOR = 1
    assert _values(lab.run(_reads_global, cfg)) == [1]
    FACTOR = 3
    assert _values(lab.run(_reads_global, cfg)) == [3]


def test_state_is_kept_while_the_step_is_unchanged(lab):
    cfg = StepConfig(scenario="custom", warmup=0, steps=1, profiled=0)

    def counting(ctx):
        ctx.state["n"] = ctx.state.get("n", 0) + 1
        ctx.report(v=ctx.state["n"])
    assert _values(lab.run(counting, cfg)) == [1]
    assert _values(lab.run(counting, cfg)) == [2]       # same bytes: state kept


def test_redefined_workload_is_rebuilt(lab):
    cfg = NET.config(warmup=0, steps=1, profiled=0)

    def make(n):             # one definition; n is what its model factory closes over
        return Workload(model=lambda: Net(n=n), batch=_batch, loss=F.mse_loss)
    first = lab.run(make(1), cfg)
    again = lab.run(make(1), cfg)
    assert again.ranks[0]["reused"]                 # same code, same closure: model kept
    changed = lab.run(make(3), cfg)
    assert not changed.ranks[0]["reused"]
    assert changed.ranks[0]["model_built_at"] > first.ranks[0]["model_built_at"]
    n1, n3 = (int(r.ranks[0]["notes"][0].split(": ")[1].split()[0].replace(",", ""))
              for r in (first, changed))
    assert n1 == sum(p.numel() for p in Net(n=1).parameters())
    assert n3 == sum(p.numel() for p in Net(n=3).parameters())


# -- a real model from a real package: transformers' LlamaForCausalLM (2 decoder layers) ----
@pytest.fixture(scope="module")
def tiny_llama():
    # transformers comes with the test extra (never skipped: a model from a real package is
    # what these tests are for)
    from nbtools import models
    return models.llama(batch=2, seq=16)


@pytest.mark.slow
def test_llama_fsdp2_per_decoder_layer_compiled(lab, tiny_llama):
    run = lab.run(tiny_llama, tiny_llama.config(parallel="fsdp2", compile="default",
                                                backend="aot_eager", **FAST))
    assert run.ok
    _assert_checked(run, 1e-4)
    notes = run.ranks[0]["notes"]
    assert any("2 blocks compiled, then fully_shard per block" in n for n in notes), notes
    c = _collectives(run)
    assert c["all_gather"] > 0 and c["reduce_scatter_op"] > 0, c
    assert (run.compile_events.groupby("rank").size() >= 1).all()


@pytest.mark.slow
def test_llama_tensor_parallel_with_the_plan(lab, tiny_llama):
    from transformers import LlamaConfig, LlamaForCausalLM
    from nbtools.models import LLAMA_TINY
    run = lab.run(tiny_llama, tiny_llama.config(parallel="tp", **FAST))
    assert run.ok
    _assert_checked(run, 1e-4)
    assert _collectives(run)["all_reduce"] > 0       # after o_proj and down_proj
    full = sum(p.numel() for p in LlamaForCausalLM(LlamaConfig(**LLAMA_TINY)).parameters())
    local = int(run.ranks[0]["notes"][0].split(": ")[1].split()[0].replace(",", ""))
    # q/k/v/o and gate/up/down hold half their weights on each of the 2 ranks
    d, f, kv = 64, 128, 64 // 4 * 2
    sharded = 2 * (d * d + 2 * d * kv + d * d + 3 * d * f)
    assert local == full - sharded // 2


def test_a_workload_takes_any_step_config_and_its_runs_carry_its_name(lab, tmp_path):
    """StepConfig(parallel="ddp") names no scenario: the default one (tp-mlp-infer, no DDP)
    never judges a Workload's run; only the Workload's own rules do. Its runs are titled by
    the Workload's name everywhere (label, CLI table, report), also once reloaded."""
    from nbtools.cli.main import format_table
    from nbtools.config.workload import check_run
    from nbtools.report.html import export_html
    from nbtools.results.history import History
    cfg = StepConfig(parallel="ddp", autocast="bf16", autocast_scope="step",
                     warmup=0, steps=1, profiled=0)
    with pytest.raises(ConfigError, match="StepConfig's default scenario"):
        check_run(None, cfg, "cpu")                    # run alone, it is that scenario's
    run = lab.run(NET, cfg)
    assert run.ok and run.config.resolved_parallel == "ddp"
    assert run.title.startswith("net ") and run.label.startswith(f"#{run.run_id} net ")
    assert "parallel=ddp" in run.title
    assert f"\n{run.title}  (#{run.run_id}, " in format_table([run])   # its id and start
    html = export_html(tmp_path / "r.html", [run]).read_text()
    assert f"Run #{run.run_id} · {run.title}</h2>" in html
    again = History.load(lab.history.folder)[run.run_id]
    assert again.title == run.title
    # notebook 06's table: the CLI's names, rounded, nothing-measured columns left out
    from nbtools.claims.model_sweep import styled, table
    shown = styled(table([run]))
    assert "step_ms" in shown.data and "nan" not in shown.to_html().lower()
    assert not shown.data.isna().all().any()


def test_panel_drives_a_workload(lab):
    """lab.panel(workload): the controls' config runs the workload; a choice it cannot
    honour shows its ConfigError and runs nothing."""
    pytest.importorskip("ipywidgets")
    from nbtools.widgets.panel import Panel
    p = Panel(lab, NET.config(warmup=0, steps=1, profiled=1), step_fn=NO_EXTRAS)
    assert lab.panel(NET) is not None
    p.controls["parallel"].value = "ddp"
    p.run_button.click()
    run = lab.history[-1]
    assert p.error.value == "" and run.ok and run.config.resolved_parallel == "ddp"
    assert p.shown is run
    n = len(lab.history)
    p.controls["parallel"].value = "tp"             # NO_EXTRAS has no tp_plan
    p.run_button.click()
    assert "tp_plan" in p.error.value and "ConfigError" in p.status.value
    assert len(lab.history) == n


def _fixed_batch(step, device):
    g = torch.Generator().manual_seed(0)
    return torch.randn(8, 32, generator=g), torch.randn(8, 1, generator=g)


def _frozen(params):
    return torch.optim.SGD(params, lr=0.0)


def test_the_workloads_optimizer_and_seed_are_used(lab):
    """Built from seed 0 on every rank, and stepped with the Workload's optimizer (lr=0: the
    weights stay): the last loss is the loss of Net() seeded 0 on that batch, here."""
    wl = Workload(model=Net, batch=_fixed_batch, loss=F.mse_loss, optimizer=_frozen)
    run = lab.run(wl, wl.config(warmup=1, steps=2, profiled=0))
    torch.manual_seed(0)
    x, y = _fixed_batch(0, "cpu")
    with torch.no_grad():
        want = F.mse_loss(Net()(x), y).item()
    assert [run.ranks[r]["last_value"] for r in (0, 1)] == pytest.approx([want, want], rel=1e-6)
    moving = lab.run(Workload(model=Net, batch=_fixed_batch, loss=F.mse_loss),
                     wl.config(warmup=1, steps=2, profiled=0))    # the default SGD moves them
    assert moving.ranks[0]["last_value"] < want


def _growing_batch(step, device):
    g = torch.Generator().manual_seed(step)
    n = 4 + 4 * step                      # a new batch size every step
    return torch.randn(n, 32, generator=g), torch.randn(n, 1, generator=g)


@pytest.mark.slow
def test_dynamic_mark_marks_the_workloads_dims(lab):
    """dynamic='mark' marks Workload.dynamic_dims: one graph for every batch size, where
    static shapes recompile for each."""
    wl = Workload(model=Net, batch=_growing_batch, loss=F.mse_loss, dynamic_dims=((0, 0),))
    base = wl.config(compile="default", backend="aot_eager", warmup=1, steps=2, profiled=0)
    marked = lab.run(wl, base.replace(dynamic="mark"))
    static = lab.run(wl, base.replace(dynamic="static"))
    assert (marked.summary["recompiles"] == 0).all(), marked.summary
    assert (static.summary["recompiles"] >= 2).all(), static.summary


def _broken_batch(step, device):
    raise RuntimeError("planted batch failure")


def test_run_all_keeps_a_failed_run_and_goes_on(lab, capsys):
    from nbtools.claims import model_sweep as model_runs
    broken = Workload(model=Net, batch=_broken_batch, loss=F.mse_loss)
    cfg = NET.config(warmup=0, steps=1, profiled=0)
    runs = model_runs.run_all(lab, broken, [cfg])
    runs += model_runs.run_all(lab, NET, [cfg])
    assert [r.ok for r in runs] == [False, True]
    assert "planted batch failure" in capsys.readouterr().out
    t = model_runs.table(runs)
    assert t["status"].tolist() == ["failed", "ok"] and t["model"].tolist()[1] == "net"


def test_default_optimizer_keeps_dtensor_and_plain_parameters_apart(tmp_path):
    """A TP plan shards some layers and leaves others plain; a CUDA optimizer step uses
    foreach kernels, which refuse a group that mixes DTensor and Tensor (Llama under
    parallel='tp' failed so on 2 x H200). foreach=True forces that path on CPU."""
    import subprocess
    import sys
    code = """
import os, torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"], RANK="0", WORLD_SIZE="1")
dist.init_process_group("gloo")
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import parallelize_module, ColwiseParallel
from nbtools.engine.apply import _param_groups
m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
parallelize_module(m, init_device_mesh("cpu", (1,)), {"0": ColwiseParallel()})
m(torch.randn(2, 4)).sum().backward()
for params in (list(m.parameters()), _param_groups(m)):
    try:
        torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=True).step(); print("ok")
    except RuntimeError as e:
        print("mixed" if "mixed torch.Tensor and DTensor" in str(e) else repr(e))
dist.destroy_process_group()
"""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import os
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, PORT=str(port)))
    assert out.stdout.split() == ["mixed", "ok"], out.stdout + out.stderr
