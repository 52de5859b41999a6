"""optimizer_impl='foreach' / 'fused' / 'compiled' on the optimizers torch ships: the remade
optimizer comes from its own constructor's signature (torch's AdamW keeps
decoupled_weight_decay in its groups but does not take it: issue 51, a Hugging Face-built
AdamW on torch 2.11), groups keep their own settings, and a run with a Hugging Face-style
AdamW under fused and compiled runs on a 2-rank gloo lab."""
from __future__ import annotations

import pytest
import torch

from nbtools import StepConfig, Workload
from nbtools.engine.optimizer_remake import constructor_params, remade

from support.lab_steps import SMALL


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(self.lin(x))


def hf_groups(model, decay=0.1):
    """Hugging Face Trainer's grouping: weights decay, biases and norm weights do not."""
    no_decay = [n for n, _ in model.named_parameters() if "bias" in n or "norm" in n]
    return [{"params": [p for n, p in model.named_parameters() if n not in no_decay],
             "weight_decay": decay},
            {"params": [p for n, p in model.named_parameters() if n in no_decay],
             "weight_decay": 0.0}]


def hf_adamw(model):
    """torch.optim.AdamW as Trainer.create_optimizer builds it (two groups, its args)."""
    return torch.optim.AdamW(hf_groups(model), lr=5e-5, betas=(0.9, 0.999), eps=1e-8,
                             weight_decay=0.1)


def _optimizers():
    return [c for c in vars(torch.optim).values() if isinstance(c, type) and
            issubclass(c, torch.optim.Optimizer) and c is not torch.optim.Optimizer]


def test_an_hf_built_adamw_is_remade_fused_and_foreach_with_its_groups():
    model = Net()
    opt = hf_adamw(model)
    assert "decoupled_weight_decay" in opt.param_groups[0]   # what broke the old remake
    for impl in ("fused", "foreach"):
        new = remade(opt, impl)
        assert type(new) is torch.optim.AdamW and new.defaults[impl] is True
        assert [g["weight_decay"] for g in new.param_groups] == [0.1, 0.0]
        assert all(g["lr"] == 5e-5 and g[impl] is True for g in new.param_groups)
        assert [len(g["params"]) for g in new.param_groups] == [1, 3]
        assert new.param_groups[0]["decoupled_weight_decay"] is True     # AdamW still
        model(torch.randn(2, 8)).sum().backward()
        new.step()                                   # fused AdamW runs on CPU (torch >= 2.4)


def test_a_subclass_taking_kwargs_and_a_groups_own_key_are_remade():
    class Mine(torch.optim.AdamW):       # a wrapper passing its keywords on
        def __init__(self, params, **kw):
            super().__init__(params, **kw)
    model = Net()
    groups = hf_groups(model)
    groups[0]["name"] = "decay"          # a group's own key, no default of the optimizer
    opt = Mine(groups, lr=1e-3, betas=(0.8, 0.9))
    assert {"lr", "betas", "fused"} <= constructor_params(Mine)
    new = remade(opt, "fused")
    assert type(new) is Mine and new.defaults["betas"] == (0.8, 0.9)
    assert new.param_groups[0]["name"] == "decay" and new.defaults["fused"] is True


@pytest.mark.parametrize("cls", _optimizers(), ids=lambda c: c.__name__)
def test_every_torch_optimizer_is_remade_or_refused_by_name(cls):
    model = Net()
    if cls.__name__ in ("LBFGS", "Muon", "SparseAdam"):
        # one group of what each can step (LBFGS takes no groups, Muon 2-D weights only,
        # SparseAdam sparse gradients): none takes foreach= or fused=
        opt = cls([model.lin.weight], lr=1e-3)
    else:
        opt = cls(hf_groups(model, decay=0.01), lr=1e-3)
    for impl in ("foreach", "fused"):
        if impl not in constructor_params(cls):
            with pytest.raises(RuntimeError, match=f"constructor takes no {impl}="):
                remade(opt, impl)
            continue
        new = remade(opt, impl)
        assert type(new) is cls and all(g[impl] is True for g in new.param_groups)
        if len(opt.param_groups) == 2:
            assert [g["weight_decay"] for g in new.param_groups] == [0.01, 0.0]
        model.zero_grad()
        model(torch.randn(2, 8)).sum().backward()
        new.step()


def _batch(step, device):
    g = torch.Generator().manual_seed(step)
    return torch.randn(4, 8, generator=g).to(device), torch.zeros(4, 8, device=device)


LAB = "shared"     # the worker's shared lab (tests/conftest.py)


@pytest.mark.slow
def test_fused_and_compiled_run_an_hf_built_adamw_on_the_lab(lab):
    """The move the host rule proposes, on the optimizer Hugging Face builds: it runs."""
    from nbtools.config.engine_notes import optimizer_name

    def build(params):       # a Workload's optimizer gets the parameters; HF groups them
        params = list(params)
        decay = [p for p in params if p.dim() > 1]
        rest = [p for p in params if p.dim() <= 1]
        return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                  {"params": rest, "weight_decay": 0.0}],
                                 lr=5e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    wl = Workload(model=Net, batch=_batch, loss=torch.nn.functional.mse_loss,
                  optimizer=build, name="hf-adamw net")
    base = StepConfig(scenario="custom", **SMALL)
    for cfg in (base.replace(optimizer_impl="fused"),
                base.replace(optimizer_impl="compiled", compile="default", backend="eager")):
        run = lab.run(wl, cfg)
        assert run.ok, run.errors
        assert optimizer_name(run) == "AdamW"
