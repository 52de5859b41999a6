"""A Workload made real on one rank: seeded, on the rank's device, as the ``Built`` state
apply.py wraps, compiles and steps; and the pieces every workload's step shares (the tensor
a model's output reports, the TP plan applied)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from nbtools.config.step_config import ConfigError, StepConfig
from nbtools.config.workload import Workload


def param_count(model) -> int:
    """Parameters this rank holds (its shards under FSDP2 / TP)."""
    return sum(getattr(p, "_local_tensor", p).numel() for p in model.parameters())


@dataclass
class Built:
    """A Workload materialised on one rank: the module to wrap and compile, step i's inputs."""
    model: Any
    make_batch: Callable[[int], tuple]
    """step index -> (inputs tuple, target or None), on the engine's device."""
    loss_fn: Optional[Callable] = None
    dynamic_dims: tuple = ()
    items_per_step: float = 0
    flops_per_step: float = 0.0
    shapes: Callable[[int], str] = field(default=lambda i: "")
    items_at: Optional[Callable[[int], float]] = None
    """step index -> real items (the Workload's ``items`` as a function of the step)."""
    padded_at: Optional[Callable[[int], float]] = None
    """step index -> items the inputs hold, padding included (the LM scenarios pad to
    buckets); None: no padding the lab knows of, the real items."""
    blocks: Optional[Callable] = None
    tp_plan: Any = None
    optimizer: Optional[Callable] = None
    name: str = ""
    batch_size: int = 0
    """The samples a step per rank, for a Workload that takes its size (0: it does not)."""

    @property
    def train(self) -> bool:
        """True when there is a loss: the step runs backward and the optimizer."""
        return self.loss_fn is not None


def materialize(wl: Workload, cfg: StepConfig, device, model=None) -> Built:
    """Build ``wl`` on this rank: seeded, on ``device``. With ``model`` (one this workload
    built before), only the inputs are new: the engine keeps a model when just they change."""
    import torch
    if model is None:
        torch.manual_seed(cfg.seed)
        with torch.device(device):
            model = wl.model()
        if not isinstance(model, torch.nn.Module):
            raise ConfigError(f"Workload.model() returned {type(model).__name__}; it must "
                              "return a torch.nn.Module")
        model = model.to(device)
        if not wl.train:
            model = model.eval().requires_grad_(False)

    # a Workload that takes its size runs at the config's batch (its own when none)
    size = (cfg.batch or wl.batch_size) if wl.batch_size else 0
    scale = size / wl.batch_size if size else 1.0

    def make_batch(step):
        got = wl.batch(step, device, size) if size else wl.batch(step, device)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise ConfigError(f"Workload.batch({step}, device) returned {type(got).__name__}; "
                              "it must return (inputs, target)")
        inputs, target = got
        inputs = inputs if isinstance(inputs, (tuple, list)) else (inputs,)
        return tuple(_to(x, device) for x in inputs), _to(target, device)

    items = wl.items
    flops = scale * (wl.flops(model) if callable(wl.flops) else float(wl.flops))
    items_at = None
    if callable(items):
        items_at = items if scale == 1.0 else (lambda i: scale * float(items(i)))
    # the Workload's shapes text speaks of its own size
    shapes = wl.shapes if wl.shapes and scale == 1.0 else None
    return Built(model, make_batch, wl.loss, wl.dynamic_dims,
                 items_per_step=0 if callable(items) else scale * items, flops_per_step=flops,
                 shapes=shapes or (lambda i: _shape_text(make_batch(i)[0])),
                 items_at=items_at, blocks=wl.blocks, tp_plan=wl.tp_plan,
                 optimizer=wl.optimizer, name=wl.name, batch_size=size)


def _to(x, device):
    return x.to(device) if hasattr(x, "to") and hasattr(x, "device") else x


def _shape_text(inputs) -> str:
    return " ".join(f"x{i}[{','.join(map(str, t.shape))}]" for i, t in enumerate(inputs)
                    if hasattr(t, "shape"))


def tp_parallelize(built: Built, mesh):
    """Apply the tp_plan over ``mesh``: the same parallelize_module call for every model."""
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    plan = built.tp_plan
    if callable(plan):
        plan = plan(built.model, mesh)
        if not isinstance(plan, dict):          # the callable parallelised the model itself
            return plan if plan is not None else built.model
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    plan = {k: styles[v]() if isinstance(v, str) else v for k, v in plan.items()}
    return parallelize_module(built.model, mesh, plan)


def output_tensor(out):
    """The tensor a step reports (and check compares) from a model's output: itself, or the
    first tensor of a tuple / dict / transformers ModelOutput (its logits)."""
    import torch
    if isinstance(out, torch.Tensor):
        return out
    values = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else ()
    for v in values:
        if isinstance(v, torch.Tensor):
            return v
    raise TypeError(f"the model returned {type(out).__name__}, with no tensor to report; "
                    "return a tensor, a tuple or a dict of tensors")
