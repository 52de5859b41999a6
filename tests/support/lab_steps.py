"""Custom steps several test files run on a lab (they travel to the engines by value)."""
from __future__ import annotations

import inspect

# The step a lab test runs unless it needs another: one warm-up, two timed steps, one
# profiled (a timeline to draw; seconds on two CPU ranks).
SMALL = dict(warmup=1, steps=2, profiled=1)


def step_with_break(ctx):
    import torch

    def f(x):
        y = x * 2
        print("inside the compiled function")   # the graph break
        return y + 1
    return ctx.compile(f)(torch.ones(8)).sum()


def break_line() -> int:
    """The source line of step_with_break's graph break: what the records must name."""
    lines, start = inspect.getsourcelines(step_with_break)
    return start + next(i for i, t in enumerate(lines) if "the graph break" in t)


# A Workload whose step is held by its optimizer on a CPU rank: 40 small layers (80
# parameter tensors) under Adam, on a small batch (the advice and explore tests' host case).
def many_small_layers():
    import torch
    return torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(40)])


def small_batch(step, device):
    import torch
    return torch.randn(4, 8, device=device), torch.zeros(4, 8, device=device)


def adam(params):
    import torch
    return torch.optim.Adam(params, lr=1e-3)
