"""A person's own small model with a planted slow config, for lab.explore's tests: each
step brings a new sequence length, so compile with dynamic='static' recompiles at every
step (lab.advise: recompile-shapes, change dynamic='dynamic'), and dynamic=True compiles
once. The lengths come from a count of the calls on the rank, as a loader's batches keep
coming, so a config run twice in a row (A B B A | A B B A) meets new lengths in its second
run too, as a long job does; the model raises Dynamo's recompile limits, as a person who
hit them might, so static shapes keep recompiling instead of falling back to eager. The model runs in float32 only: autocast makes its runs fail (a change that fails).
backend='eager' (Dynamo alone): the recompiles are Dynamo's, and inductor's C++ compile
would take minutes on these cores."""
from __future__ import annotations

import itertools

import torch

from nbtools import StepConfig, Workload


CALLS = itertools.count()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch._dynamo.config.recompile_limit = 4096
        torch._dynamo.config.accumulated_recompile_limit = 65536
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 1)

    def forward(self, x):
        h = self.a(x).relu()
        assert h.dtype == torch.float32, "this model runs in float32 only"
        return self.b(h).mean(1)


def batch(step, device):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(4, 8 + next(CALLS) % 256, 16, generator=g)      # a new length every call
    return x.to(device), torch.zeros(4, 1, device=device)


WORKLOAD = Workload(model=Net, batch=batch, loss=torch.nn.functional.mse_loss, name="varlen-net")
SLOW = StepConfig(scenario="custom", compile="default", backend="eager", dynamic="static",
                  warmup=1, steps=3, profiled=1)
