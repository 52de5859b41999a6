"""The built-in workloads, engine side. Each builder returns a public ``Workload`` (model
factory, inputs of step i, loss or None for inference, blocks), which the engine builds and
wraps exactly as it does a user's: one path for both (workload.materialize, apply.py).

Sizes: ``small`` keeps a step to milliseconds on a 2-core CPU; ``large`` makes a step a few
ms or more on an H200. Inputs depend only on (seed, step), so every rank and every config
sees the same data and runs compare fairly.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from nbtools.config.step_config import ConfigError, StepConfig
from nbtools.config.scenarios import scenario_spec
from nbtools.config.workload import Workload
from nbtools.engine.materialize import Built, materialize


def sizes(cfg: StepConfig, device: torch.device) -> tuple[str, int, int]:
    """(size, batch, seq_len) after defaults: small on CPU, large on GPU unless asked."""
    spec = scenario_spec(cfg.scenario)
    size = cfg.size if cfg.size != "auto" else ("large" if device.type == "cuda" else "small")
    i = 0 if size == "small" else 1
    return size, cfg.batch or spec.batch[i], cfg.seq_len or spec.seq_len[i]


def workload(cfg: StepConfig, device: torch.device, rank: int, world: int,
             group=None) -> Workload:
    """The scenario as a Workload, for this rank."""
    size, batch, seq = sizes(cfg, device)
    par = cfg.resolved_parallel
    if cfg.scenario == "tp-mlp-infer":
        # unsharded (parallel="none"): every rank holds the whole model, as shard 0 of 1
        tp = par == "tp"
        return _tp_mlp_workload(size, batch, rank if tp else 0, world if tp else 1, group,
                                cfg.seed)
    if cfg.scenario == "ddp-train":
        width, stages, hw = (8, 2, 16) if size == "small" else (64, 4, 64)
        return _image_workload(lambda: ConvNet(width, stages), batch, hw, 10, cfg.seed, "convnet")
    if cfg.scenario == "resnet50-ddp":
        return _resnet50(size, batch, cfg.seed)
    if cfg.scenario in ("fsdp2-train", "varlen-train"):
        return _lm(size, batch, seq, cfg.resolved_schedule, cfg.seed)
    raise ConfigError(f"no builder for scenario {cfg.scenario!r}")


def build(cfg: StepConfig, device: torch.device, rank: int, world: int, group=None,
          model: nn.Module | None = None) -> Built:
    """The scenario built on this rank. With ``model`` (one this scenario built before),
    only the inputs are new: the engine keeps a model when just the batch changes."""
    built = materialize(workload(cfg, device, rank, world, group), cfg, device, model)
    if built.items_at is not None:     # the maximum (batch x seq_len); items_at: real tokens
        size, batch, seq = sizes(cfg, device)
        built.items_per_step = batch * seq
        sched, seed = cfg.resolved_schedule, cfg.seed
        built.padded_at = lambda i: batch * seq_len_at(i, seq, sched, seed)[1]
    return built


def _gen(seed: int, step: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed * 1_000_003 + step)
    return g


# -- tp-mlp-infer ------------------------------------------------------------------------
def _linear_init(out_f: int, in_f: int, g: torch.Generator) -> torch.Tensor:
    """nn.Linear's default weight distribution, U(-1/sqrt(in), 1/sqrt(in)), from g."""
    w = torch.rand(out_f, in_f, generator=g, device=g.device)
    return (w * 2 - 1) / in_f ** 0.5


class TPBlock(nn.Module):
    """Column-parallel up projection, row-parallel down projection, then one all-reduce
    (functional collective, so torch.compile and CUDA graphs can capture it)."""

    def __init__(self, d: int, hidden: int, world: int, group):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, hidden // world, bias=False)
        self.down = nn.Linear(hidden // world, d, bias=False)
        self.world, self.group = world, group

    def forward(self, x):
        """Pre-norm MLP with a residual; across ranks the partial outputs are summed (functional
        all-reduce, which torch.compile traces)."""
        y = self.down(F.gelu(self.up(self.norm(x))))
        if self.world > 1:
            import torch.distributed._functional_collectives as funcol
            y = funcol.all_reduce(y, "sum", self.group)
        return x + y


class TPMLP(nn.Module):
    """A stack of TPBlocks: the tp-mlp scenarios' model."""
    def __init__(self, d, hidden, blocks, world, group):
        super().__init__()
        self.blocks = nn.ModuleList(TPBlock(d, hidden, world, group) for _ in range(blocks))

    def forward(self, x):
        """The blocks in order."""
        for b in self.blocks:
            x = b(x)
        return x


def _tp_weights(d, hidden, blocks, rank, world, group, device, seed) -> TPMLP:
    """Each rank draws the full weights of every block from one seed and keeps its shard, so
    the TP model computes exactly what the unsharded one does. Drawn on the device a block
    at a time: building the full 1 G-parameter model on the CPU cost ~10 s a run on GPUs."""
    k = hidden // world
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    with torch.device("meta"):      # no default init: every weight is drawn below
        model = TPMLP(d, hidden, blocks, world, group)
    model = model.to_empty(device=device)
    with torch.no_grad():
        for b in model.blocks:
            b.norm.reset_parameters()
            up, down = _linear_init(hidden, d, g), _linear_init(d, hidden, g)
            b.up.weight.copy_(up[rank * k:(rank + 1) * k])
            b.down.weight.copy_(down[:, rank * k:(rank + 1) * k])
    return model.eval().requires_grad_(False)


def _tp_mlp_workload(size, batch, rank, world, group, seed) -> Workload:
    d, blocks = (256, 4) if size == "small" else (4096, 8)
    hidden = 4 * d
    if hidden % world:
        raise ConfigError(f"tp-mlp-infer: hidden size {hidden} does not split over {world} ranks")

    def model():
        return _tp_weights(d, hidden, blocks, rank, world, group, torch.get_default_device(), seed)

    def batch_of(step, device):
        return torch.randn(batch, d, generator=_gen(seed, step)), None

    # The model is built sharded (each rank keeps its slice of seeded full weights, and the
    # blocks all-reduce through functional collectives): the plan has nothing left to do.
    return Workload(model, batch_of, None, blocks=lambda m: m.blocks,
                    tp_plan=lambda m, mesh: m, dynamic_dims=((0, 0),), items=batch,
                    flops=2.0 * batch * blocks * 2 * d * hidden,
                    shapes=lambda i: f"x[{batch},{d}]", name="tp-mlp-infer")


def _tp_mlp(size, batch, device, rank, world, group, seed, model=None) -> Built:
    """The tp-mlp-infer model and inputs on their own (benchmarks/gpu use it)."""
    cfg = StepConfig(scenario="tp-mlp-infer", seed=seed)
    return materialize(_tp_mlp_workload(size, batch, rank, world, group, seed), cfg, device, model)


# -- ddp-train: a small residual conv net -------------------------------------------------
class ResBlock(nn.Module):
    """A residual block of two 3x3 convolutions with GroupNorm (batch-size free, so DDP's
    ranks need no synchronised statistics)."""
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.n1 = nn.GroupNorm(8 if cout >= 8 else 1, cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.n2 = nn.GroupNorm(8 if cout >= 8 else 1, cout)
        self.skip = nn.Conv2d(cin, cout, 1, stride, bias=False) if (stride != 1 or cin != cout) \
            else nn.Identity()

    def forward(self, x):
        """conv-norm-relu-conv-norm, plus the (projected) input, then relu."""
        return F.relu(self.skip(x) + self.n2(self.c2(F.relu(self.n1(self.c1(x))))))


class ConvNet(nn.Module):
    """A small ResNet-like classifier: the convolution scenario's model."""
    def __init__(self, width, stages, classes=10):
        super().__init__()
        layers, c = [nn.Conv2d(3, width, 3, 1, 1, bias=False)], width
        for s in range(stages):
            layers += [ResBlock(c, width * 2 ** s, 2 if s else 1), ResBlock(width * 2 ** s, width * 2 ** s, 1)]
            c = width * 2 ** s
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        """Logits: the stages, global average pooling, a linear head."""
        return self.head(self.body(x).mean((2, 3)))


def _resnet50(size, batch, seed) -> Workload:
    try:
        import torchvision
    except Exception as e:  # the CPU torch build here cannot import PyPI's torchvision
        from nbtools.common.extras import hint
        raise ConfigError(f"resnet50-ddp needs torchvision, which does not import on this "
                          f"engine ({type(e).__name__}: {e}): {hint('torchvision')}; or use "
                          "ddp-train") from None
    hw = 64 if size == "small" else 224
    return _image_workload(lambda: torchvision.models.resnet50(num_classes=1000), batch, hw,
                           1000, seed, "resnet50", flops=3 * 4.1e9 * batch * (hw / 224) ** 2)


def _image_workload(model, batch, hw, classes, seed, name, flops=0.0) -> Workload:
    def batch_of(step, device):
        g = _gen(seed, step)
        return torch.randn(batch, 3, hw, hw, generator=g), torch.randint(0, classes, (batch,),
                                                                         generator=g)

    return Workload(model, batch_of, F.cross_entropy, dynamic_dims=((0, 0),), items=batch,
                    flops=flops, shapes=lambda i: f"x[{batch},3,{hw},{hw}]", name=name)


# -- fsdp2-train / varlen-train: a small transformer LM ----------------------------------
class Block(nn.Module):
    """A pre-norm transformer block: causal self-attention (SDPA) and a GELU MLP."""
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.up = nn.Linear(d, 4 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        """Attention then MLP, each with a residual; ``x`` is (batch, time, d)."""
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class TinyLM(nn.Module):
    """A small decoder-only language model: embedding, Blocks, final norm and head."""
    def __init__(self, vocab, d, heads, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        """Logits (batch, time, vocab) for token ids (batch, time)."""
        x = self.embed(tokens)
        for blk in self.layers:
            x = blk(x)
        return self.head(self.norm(x))


def lm_loss(logits, target):
    """Next-token cross entropy in float32 over every position (-100: padding, ignored)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), ignore_index=-100)


def seq_len_at(step: int, seq: int, schedule: str, seed: int) -> tuple[int, int]:
    """(real tokens, padded length) for step i. varying: a new length each step in
    [seq/4, seq]; bucketed: the same lengths padded up to the next multiple of seq/4."""
    if schedule == "fixed":
        return seq, seq
    lo = max(2, seq // 4)
    n = int(torch.randint(lo, seq + 1, (1,), generator=_gen(seed + 7, step)).item())
    if schedule == "varying":
        return n, n
    bucket = max(1, seq // 4)
    return n, min(seq, int(math.ceil(n / bucket) * bucket))


def _lm(size, batch, seq, schedule, seed) -> Workload:
    vocab, d, heads, layers = (256, 64, 4, 2) if size == "small" else (32000, 1024, 16, 8)

    def batch_of(step, device):
        n, padded = seq_len_at(step, seq, schedule, seed)
        g = _gen(seed, step)
        tokens = torch.randint(0, vocab, (batch, padded + 1), generator=g)
        target = tokens[:, 1:].clone()
        if padded > n:                       # padding: masked out of the loss
            target[:, n:] = -100
        return tokens[:, :-1].contiguous(), target

    return Workload(lambda: TinyLM(vocab, d, heads, layers), batch_of, lm_loss,
                    blocks=lambda m: m.layers, dynamic_dims=((0, 1),),
                    items=lambda i: batch * seq_len_at(i, seq, schedule, seed)[0],
                    flops=lambda m: 6.0 * sum(p.numel() for p in m.parameters()) * batch * seq,
                    shapes=lambda i: f"tokens[{batch},{seq_len_at(i, seq, schedule, seed)[1]}]",
                    name="tiny-lm")
