"""The precision fields on real CPU ranks (issue 51): matmul_precision set for a run and put
back, channels_last reaching the model and its inputs, and check=True measuring a run's
first-step loss against full fp32 - the numbers lab.explore keeps a precision move on."""
from __future__ import annotations

import torch

from nbtools import StepConfig, Workload
from nbtools.analysis.numerics import numerics
from nbtools.lab.numerics_check import changes_numbers, check_numbers

LAB = "shared"


class Probe(torch.nn.Module):
    """A conv and a linear layer that say, at each call, the layout and precision they ran
    under (as a buffer the step's loss carries back: the engine keeps nothing else)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.lin = torch.nn.Linear(4, 1)

    def forward(self, x):
        seen = [float(x.is_contiguous(memory_format=torch.channels_last)),
                float(self.conv.weight.is_contiguous(memory_format=torch.channels_last)),
                float(torch.get_float32_matmul_precision() == "high")]
        out = self.lin(self.conv(x).mean((2, 3)))
        return out, torch.tensor(seen)


def _loss(out, target):
    pred, seen = out
    # the loss is exact and tiny; the flags ride along at a scale the loss cannot reach
    return torch.nn.functional.mse_loss(pred, target) + 0 * pred.sum() + 1e3 * seen @ torch.tensor([1.0, 10.0, 100.0])


PROBE = Workload(model=Probe, batch=lambda step, device: (torch.randn(2, 3, 8, 8), torch.zeros(2, 1)),
                 loss=_loss, items=2, name="probe")


def _flags(run) -> float:
    chk = run.ranks[0]["check"]
    return round(chk["value"] / 1e3)       # 1 x channels_last input + 10 x weight + 100 x TF32


def test_channels_last_and_tf32_reach_the_step_and_are_put_back(lab):
    base = StepConfig(scenario="custom", warmup=0, steps=1, profiled=0, check=True)
    assert _flags(lab.run(PROBE, base)) == 0
    assert _flags(lab.run(PROBE, base.replace(memory_format="channels_last"))) == 11
    assert _flags(lab.run(PROBE, base.replace(matmul_precision="high"))) == 100
    # the next run's config decides: 'as-set' finds what the process had, not 'high'
    assert _flags(lab.run(PROBE, base)) == 0


class Exact(torch.nn.Module):
    """y = x @ W with W the data's own: its fp32 loss is the data's 1e-6 of noise, and the
    rounding of the inputs (bf16 keeps 8 bits of mantissa) a loss a thousand times that -
    numbers that diverge."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.lin = torch.nn.Linear(64, 8, bias=False)
        with torch.no_grad():
            self.lin.weight.copy_(torch.randn(8, 64, generator=g))

    def forward(self, x):
        return self.lin(x)


def _exact_batch(step, device):
    g = torch.Generator().manual_seed(1)
    w = torch.randn(8, 64, generator=g)
    gx = torch.Generator().manual_seed(100 + step)
    x = torch.randn(16, 64, generator=gx)
    return x, x @ w.T + 1e-3 * torch.randn(16, 8, generator=gx)     # fp32 loss ~1e-6


EXACT = Workload(model=Exact, batch=_exact_batch, loss=torch.nn.functional.mse_loss,
                 items=16, name="exact")
SMOOTH = Workload(model=lambda: torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                                    torch.nn.Linear(64, 1)),
                  batch=lambda step, device: (torch.randn(32, 64), torch.randn(32, 1)),
                  loss=torch.nn.functional.mse_loss, items=32, name="smooth")


def test_check_measures_bf16_against_full_fp32_and_refuses_what_diverges(lab):
    start = StepConfig(scenario="custom", warmup=1, steps=2, profiled=0)
    assert changes_numbers(None, {"autocast": "bf16"}) and not changes_numbers(None, {"compile": "default"})
    ok, took, run = check_numbers(lab, SMOOTH, start.replace(autocast="bf16"))
    chk = run.ranks[0]["check"]
    assert {"full_max_rel", "value", "full_value", "ref_value"} <= set(chk)
    assert ok.measured and ok.ok, ok.text                 # a tanh MLP's loss: within 2 %
    assert 0 < ok.rel < 0.02 and took > 0
    far, _, _ = check_numbers(lab, EXACT, start.replace(autocast="bf16"))
    assert far.measured and not far.ok and "diverge" in far.text, far.text
    # the same exact model in fp32 agrees with itself
    same, _, run = check_numbers(lab, EXACT, start)
    assert numerics(run).ok and same.rel < 1e-3, same.text
