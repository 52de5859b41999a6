"""A user's own step: ``lab.run(my_step, cfg)``. The function runs once per step on every
rank as ``my_step(ctx)``; ``ctx`` applies the config's compile and autocast settings, and
keeps state across steps and runs while the step's code (and what it closes over) is
unchanged. ``check=True`` compares what the step returns, eager against compiled. The lab
applies nothing else to a step (it does not know the model): parallel, cudagraph and
dynamic='mark' need a ``Workload`` (workload.check_step says so)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from nbtools.engine import apply
from nbtools.config.step_config import StepConfig
from nbtools.engine.materialize import Built


@dataclass
class StepContext:
    """What a user's step function ``fn(ctx)`` gets on its rank: rank, world size, device,
    process group, the config, and ``state`` kept across its steps."""
    rank: int
    world_size: int
    device: torch.device
    group: object
    cfg: StepConfig
    state: dict = field(default_factory=dict)
    """Kept on the engine across steps and runs (models, optimizers, data)."""
    step: int = 0
    rows: list = field(default_factory=list)
    """What report() recorded in the current run (the engine empties it per run)."""

    def report(self, **values) -> None:
        """Record values for this step (a loss, a metric, a dtype): they come back as
        ``run.reports``, one row per call with its rank and step, saved with the run. A
        one-element tensor is read with .item(), which waits for the device: report what
        you need rather than everything every step."""
        clash = {"rank", "step"} & set(values)
        if clash:
            raise ValueError(f"ctx.report({', '.join(sorted(clash))}=...): rank and step are "
                             "filled in by the lab; use another name")
        row = {"rank": self.rank, "step": self.step}
        for k, v in values.items():
            if isinstance(v, torch.Tensor):
                v = v.item() if v.numel() == 1 else str(tuple(v.shape))
            elif isinstance(v, torch.dtype):
                v = str(v)
            elif v is not None and not isinstance(v, (bool, int, float, str)):
                v = repr(v)
            row[k] = v
        self.rows.append(row)

    def compile(self, fn):
        """torch.compile with the config's mode/backend/dynamic; identity when compile='off'.
        Cached per object, so calling it every step is free."""
        if not self.cfg.compiled:
            return fn
        key = ("compiled", id(fn), self.cfg.compile, self.cfg.backend, self.cfg.dynamic,
               self.cfg.fullgraph)
        if key not in self.state:
            self.state[key] = torch.compile(fn, **apply.compile_kwargs(self.cfg))
        return self.state[key]

    def autocast(self):
        """Autocast as the config asks (a null context when autocast='off')."""
        if self.cfg.autocast == "off":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=apply.AUTOCAST_DTYPES[self.cfg.autocast])


def prepare_custom(user_fn, cfg: StepConfig, engine_state, source_key: str):
    """``source_key`` hashes the step's pickled bytes: its state is kept across runs while
    they are the same; a redefined step (same name, other bytes) replaces its old state."""
    name = getattr(user_fn, "__qualname__", type(user_fn).__qualname__)
    states = engine_state.custom_state
    for k in [k for k in states if k[0] == name and k[1] != source_key]:
        del states[k]
    state = states.setdefault((name, source_key), {})
    ctx = StepContext(engine_state.rank, engine_state.world, engine_state.device,
                      engine_state.group, cfg, state, rows=engine_state.reports)

    def step(inputs, target):
        ctx.step = inputs[0]
        out = user_fn(ctx)
        return out.detach() if isinstance(out, torch.Tensor) else torch.zeros(())

    def eager(inputs, target):
        # check=True: the step's result eagerly, then compiled (the first step)
        with torch.compiler.set_stance("force_eager"):
            ctx.step = inputs[0]
            out = user_fn(ctx)
        if not isinstance(out, torch.Tensor):
            raise ValueError(f"check=True compares what the step returns, eager against "
                             f"compiled, and it returned {type(out).__name__}: return the "
                             "loss or output tensor, or wrap the model in nbtools.Workload")
        return out.detach()

    wl = Built(model=torch.nn.Identity(), make_batch=lambda i: ((i,), None),
               shapes=lambda i: "custom")
    return wl, apply.Prepared(step, wl.model, None, eager, ("custom step: " +
                              getattr(user_fn, "__name__", "fn"),))
