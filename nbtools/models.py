"""Workloads of models people train, from their own packages (the ``models`` extra):
Hugging Face transformers' LlamaForCausalLM from a LlamaConfig (random weights, nothing
downloaded) and torchvision's ResNet-50. Notebook 06 runs them through every strategy.

The functions a Workload holds are module-level here (bound with functools.partial), so
they travel to the engines by reference with their arguments by value.
"""
from __future__ import annotations

from functools import partial

from nbtools.config.step_config import ConfigError
from nbtools.config.workload import Workload
from nbtools.common.extras import require

# Megatron-style tensor parallelism of a Llama decoder layer, as transformers' own
# LlamaConfig.base_model_tp_plan: q/k/v and gate/up column-parallel (each rank computes its
# heads / its slice of the MLP), o and down row-parallel (one all-reduce after each). The
# attention reshapes with -1 heads (view(*shape, -1, head_dim)), so each rank runs
# num_heads / ranks heads with no change to the module; both head counts must divide.
LLAMA_TP_PLAN = {f"model.layers.*.{path}": style for path, style in (
    ("self_attn.q_proj", "colwise"), ("self_attn.k_proj", "colwise"),
    ("self_attn.v_proj", "colwise"), ("self_attn.o_proj", "rowwise"),
    ("mlp.gate_proj", "colwise"), ("mlp.up_proj", "colwise"), ("mlp.down_proj", "rowwise"))}

# LlamaConfig sizes: a CPU-test size and ~1.2 B parameters (Llama-3.2-1B's shape, 32k vocab).
LLAMA_TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2)
LLAMA_1B = dict(vocab_size=32000, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                num_attention_heads=32, num_key_value_heads=8)


def llama(batch: int = 2, seq: int = 64, seed: int = 0, name: str = "llama", **config) -> Workload:
    """``LlamaForCausalLM(LlamaConfig(**config))`` training on random tokens (next-token loss),
    ``batch`` x ``seq`` tokens a step on every rank (``batch_size``: StepConfig(batch=N)
    runs it at N); ``config``: LlamaConfig fields over
    LLAMA_TINY (``use_cache`` defaults to False here, unlike HF's default). Blocks: the
    decoder layers (FSDP2 shards and compiles each); tp_plan: LLAMA_TP_PLAN."""
    require("transformers", why="nbtools.models.llama")
    # training needs no KV cache; use_cache=True stays possible because a person's model
    # often has it on (HF's default), and with per-block compile it recompiles every block
    config = {**LLAMA_TINY, "use_cache": False, **config}
    if config["hidden_size"] % config["num_attention_heads"]:
        raise ConfigError(f"hidden_size={config['hidden_size']} is not a multiple of "
                          f"num_attention_heads={config['num_attention_heads']}")
    vocab, layers, d = config["vocab_size"], config["num_hidden_layers"], config["hidden_size"]
    tokens = batch * seq
    # PaLM's count (appendix B): 6 N per token for the matmuls, plus 12 L d seq for attention
    flops = partial(_llama_flops, tokens=tokens, attn=12 * layers * d * seq)
    return Workload(model=partial(_llama_model, config), batch=partial(_tokens, vocab, seq, seed),
                    loss=_next_token_loss, blocks=_decoder_layers, tp_plan=_llama_plan,
                    dynamic_dims=((0, 1),), items=tokens, flops=flops, name=name,
                    shapes=partial(_token_shape, batch, seq), batch_size=batch)


def _llama_plan(model, mesh):
    """LLAMA_TP_PLAN, once both head counts are known to split over the mesh."""
    ranks = mesh.size()
    for k in ("num_attention_heads", "num_key_value_heads"):
        n = getattr(model.config, k)
        if n % ranks:
            raise ValueError(f"{k}={n} does not split over {ranks} tensor-parallel ranks; "
                             "choose a multiple of the rank count")
    return dict(LLAMA_TP_PLAN)


def _llama_model(config: dict):
    from transformers import LlamaConfig, LlamaForCausalLM
    return LlamaForCausalLM(LlamaConfig(**config))


def _decoder_layers(model):
    return model.model.layers


def _tokens(vocab, seq, seed, step, device, batch):
    import torch
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    t = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    return t[:, :-1].contiguous(), t[:, 1:].contiguous()


def _next_token_loss(out, target):
    import torch.nn.functional as F
    logits = out.logits if hasattr(out, "logits") else out
    return F.cross_entropy(logits.flatten(0, 1).float(), target.flatten())


def _llama_flops(model, tokens, attn):
    return float(tokens * (6 * sum(p.numel() for p in model.parameters()) + attn))


def _token_shape(batch, seq, step):
    return f"input_ids[{batch},{seq}]"


def resnet50(batch: int = 64, hw: int = 224, classes: int = 1000, seed: int = 0) -> Workload:
    """torchvision's ResNet-50 training on random images. Blocks: its four stages (FSDP2
    shards each); no tp_plan (parallel='tp' is a ConfigError). Needs torchvision on the
    engines (GPU hosts: it does not import beside a CPU-only torch 2.13)."""
    return Workload(model=partial(_resnet50_model, classes), batch=partial(_images, hw, classes, seed),
                    loss=_cross_entropy, blocks=_resnet_stages, dynamic_dims=((0, 0),),
                    items=batch, flops=3 * 4.1e9 * batch * (hw / 224) ** 2, name="resnet50",
                    shapes=partial(_image_shape, batch, hw), batch_size=batch)


def _resnet50_model(classes):
    try:
        import torchvision
    except Exception as e:
        from nbtools.common.extras import hint
        raise RuntimeError(f"ResNet-50 needs torchvision, which does not import on this engine "
                           f"({type(e).__name__}: {e}); {hint('torchvision')}") from None
    return torchvision.models.resnet50(num_classes=classes)


def _resnet_stages(model):
    return [model.layer1, model.layer2, model.layer3, model.layer4]


def _images(hw, classes, seed, step, device, batch):
    import torch
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randn(batch, 3, hw, hw, generator=g), torch.randint(0, classes, (batch,), generator=g)


def _cross_entropy(out, target):
    import torch.nn.functional as F
    return F.cross_entropy(out, target)


def _image_shape(batch, hw, step):
    return f"x[{batch},3,{hw},{hw}]"
