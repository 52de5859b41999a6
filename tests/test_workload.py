"""A user's own model through every toggle (nbtools.Workload) on 2 CPU ranks (real engines,
gloo): the strategy shows in the trace, check compares against eager, every combination the
lab cannot honour is a ConfigError before dispatch, and an edited step never runs stale."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from nbtools import ConfigError, Lab, StepConfig, Workload

FAST = dict(warmup=1, steps=1, profiled=1, check=True)
COLLECTIVE = r"all_reduce|allreduce|all_gather|allgather|reduce_scatter|_reduce_scatter"


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


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with Lab(n=2, history=tmp_path_factory.mktemp("h"), timeout=600, echo=False) as lab:
        yield lab


def _collectives(run) -> dict:
    """Collective kernels/ops in the profiled trace, by kind, over both ranks."""
    ev = run.events
    names = ev[ev["name"].str.contains(COLLECTIVE, case=False, regex=True)]["name"].str.lower()
    return dict(all_reduce=int(names.str.contains("all_?reduce").sum()),
                all_gather=int(names.str.contains("all_?gather").sum()),
                reduce_scatter=int(names.str.contains("reduce_scatter").sum()))


def _assert_checked(run, tol):
    for r in (0, 1):
        c = run.ranks[r]["check"]
        assert c["finite"] and c["what"] == "loss", c
        assert c["max_rel"] <= tol, (run.config.label(), c)


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
    assert seen["none"] == dict(all_reduce=0, all_gather=0, reduce_scatter=0), seen
    assert seen["ddp"]["all_reduce"] > 0 and seen["ddp"]["all_gather"] == 0, seen
    assert seen["fsdp2"]["all_gather"] > 0 and seen["fsdp2"]["reduce_scatter"] > 0, seen


@pytest.mark.slow
def test_user_workload_tensor_parallel(lab):
    run = lab.run(NET, parallel="tp", **FAST)
    assert run.ok
    _assert_checked(run, 1e-5)
    # each rank holds its half of up/down (colwise / rowwise): 2 blocks x (32x128 + 128 +
    # 128x32) / 2 + the replicated norms, head (65) and down biases (32)
    assert any("workload net: 0.0M" in n for n in run.ranks[0]["notes"])
    assert _collectives(run)["all_reduce"] > 0           # the row-parallel outputs
