"""A StepConfig as the lines of a person's own training script: what the lab applied on
every rank (engine/apply.py), written the way a script does it. Every field that changes
the step has its code here; fields that only change how the lab measures (warmup, steps,
profiled, capture, check, cache, ...) have none. Pure text: valid Python whose names
(model, x, target, loss_fn, opt, local_rank, mesh, tp_plan) are the script's own."""
from __future__ import annotations

from nbtools.config.step_config import StepConfig

# The lab's own measuring fields: they change what is recorded, not the step.
MEASURING = ("scenario", "warmup", "steps", "profiled", "capture", "check", "torch_trace",
             "memory", "stack", "seed", "cache", "size", "seq_len")
_DYNAMIC = {"static": "False", "dynamic": "True"}

_DTYPE = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}
_OPTIMIZE_DDP = {"ddp_optimizer": '"ddp_optimizer"', "python_reducer": '"python_reducer"',
                 "off": "False"}


def compile_args(cfg: StepConfig) -> list:
    """torch.compile's keyword arguments for cfg, only those that differ from its defaults
    (engine/apply.py compile_kwargs is what the lab passed)."""
    args = []
    if cfg.compile != "default":
        args.append(f'mode="{cfg.compile}"')
    if cfg.backend != "inductor":
        args.append(f'backend="{cfg.backend}"')
    if cfg.dynamic in _DYNAMIC:
        args.append(f"dynamic={_DYNAMIC[cfg.dynamic]}")
    if cfg.fullgraph:
        args.append("fullgraph=True")
    return args


def compile_call(cfg: StepConfig, what: str = "model") -> str:
    """``torch.compile(model, mode=..., backend=..., dynamic=..., fullgraph=...)``."""
    return f"torch.compile({', '.join([what] + compile_args(cfg))})"


def _mark(cfg, changed) -> str:
    return "   # changed" if any(f in changed for f in ("compile", "backend", "dynamic",
                                                        "fullgraph")) else ""


def fsdp_lines(reshard: bool, blocks: bool = True, custom: bool = False) -> list:
    """fully_shard as the lab applies it: each block, then the root; a model without
    blocks is one unit (the root only)."""
    arg = f"reshard_after_forward={reshard}"
    if not blocks:
        return [f"fully_shard(model, {arg})   # one unit: the lab was given no blocks "
                "(Workload(blocks=...) shards each)"]
    head = "for block in model.layers:" + ("   # your model's repeated blocks (the "
                                          "Workload's blocks)" if custom else "")
    return [head, f"    fully_shard(block, {arg})", f"fully_shard(model, {arg})"]


def _wrapping(cfg: StepConfig, changed, blocks: bool = True) -> list:
    par, lines = cfg.resolved_parallel, []
    tag = lambda *fs: "   # changed" if any(f in changed for f in fs) else ""  # noqa: E731
    ctag = _mark(cfg, changed)
    if cfg.compiled and par == "ddp":
        lines.append(f"torch._dynamo.config.optimize_ddp = {_OPTIMIZE_DDP[cfg.optimize_ddp]}"
                     + tag("optimize_ddp"))
    if par == "ddp":
        ddp = "DDP({}, device_ids=[local_rank], bucket_cap_mb=25)   # DDP's default buckets"
        if not cfg.compiled:
            lines.append("model = " + ddp.format("model"))
        elif cfg.ddp_wrap == "compile-inside":
            lines.append("model = " + ddp.format(compile_call(cfg)) + tag("ddp_wrap") + ctag)
        else:
            lines.append("model = " + ddp.format("model"))
            lines.append(f"model = {compile_call(cfg)}   # around DDP" + tag("ddp_wrap") + ctag)
    elif par == "fsdp2":
        rtag = tag("reshard_after_forward", "parallel")
        per_block = cfg.compiled and cfg.fsdp_compile == "per-block" and blocks
        shard = fsdp_lines(cfg.reshard_after_forward, blocks, cfg.scenario == "custom")
        lines.append(shard[0] if blocks else shard[0] + rtag)
        if per_block:
            lines.append(f"    block.compile({', '.join(compile_args(cfg))})   # in place, "
                         "before fully_shard" + tag("fsdp_compile") + ctag)
        lines += [ln + rtag for ln in shard[1:]]
        if cfg.compiled and not per_block:
            lines.append(f"model = {compile_call(cfg)}   # the sharded model, whole"
                         + tag("fsdp_compile") + ctag)
    elif par == "tp":
        lines.append("model = parallelize_module(model, mesh, tp_plan)" + tag("parallel"))
        if cfg.compiled:
            lines.append(f"model = {compile_call(cfg)}" + ctag)
    elif cfg.compiled:
        lines.append(f"model = {compile_call(cfg)}" + ctag)
    return lines


def _autocast(cfg: StepConfig, changed, train: bool = True) -> list:
    tag = "   # changed" if {"autocast", "autocast_scope"} & set(changed) else ""
    if not train:      # served: forward only, no loss, no backward (the lab's no_grad)
        if cfg.autocast == "off":
            return ["with torch.no_grad():", "    out = model(x)" + tag]
        return [f"with torch.no_grad(), torch.autocast(device_type, "
                f"dtype={_DTYPE[cfg.autocast]}):" + tag, "    out = model(x)"]
    if cfg.autocast == "off":
        return (["out = model(x)" + tag, "loss = loss_fn(out, target)", "loss.backward()"])
    ctx = f'with torch.autocast(device_type, dtype={_DTYPE[cfg.autocast]}):' + tag
    if cfg.autocast_scope == "forward":
        return [ctx, "    out = model(x)", "loss = loss_fn(out.float(), target)",
                "loss.backward()"]
    if cfg.autocast_scope == "forward+loss":
        return [ctx, "    loss = loss_fn(model(x), target)", "loss.backward()"]
    return [ctx + "   # the whole step, backward too", "    loss = loss_fn(model(x), target)",
            "    loss.backward()"]


def _optimizer(cfg: StepConfig, changed) -> list:
    """The optimizer lines where optimizer_impl changes them (as-built: the script's own)."""
    tag = "   # changed" if "optimizer_impl" in changed else ""
    if cfg.optimizer_impl in ("foreach", "fused"):
        return [f"# your optimizer, made with {cfg.optimizer_impl}=True (Adam, AdamW, SGD, "
                "Adagrad take it):",
                f"opt = torch.optim.AdamW(model.parameters(), lr=lr, "
                f"{cfg.optimizer_impl}=True)" + tag, "opt.step()"]
    if cfg.optimizer_impl == "compiled":
        return ["@torch.compile(fullgraph=False)   # the compiled-optimizer recipe" + tag,
                "def opt_step():", "    opt.step()", "opt_step()   # in place of opt.step()"]
    return []


def script_code(cfg: StepConfig, changed=(), step: bool = False, nothing=None,
                train: bool = True, model_lines=(), blocks: bool = True) -> str:
    """The lines for ``cfg``; ``changed``: the fields an exploration changed (their lines
    say so); ``step``: a step function ran it (it compiles through ctx.compile);
    ``nothing``: a sentence to lead with when nothing changed; ``train``: False for a
    served model (forward only: a Workload without a loss, an inference scenario);
    ``model_lines``: lines on the built model (``model.config.use_cache = False``), which a
    script runs before it shards or compiles the model (both read the model as it is);
    ``blocks``: False when FSDP2 sharded the model as one unit (``sharded_whole``)."""
    changed, custom = tuple(changed), cfg.scenario == "custom"
    out = ["# what the lab ran, as code for your own script"]
    if nothing:
        out.append(f"# {nothing}: keep your script as it is; these lines are what it ran")
    moved = [f for f in changed if f not in MEASURING]
    if moved:
        out.append(f"# changed by the exploration: {', '.join(moved)}")
    if "batch" in changed and cfg.batch:
        # the lab's scenarios make their own batches: in a script it is the loader's size
        out.append(f"loader = DataLoader(dataset, batch_size={cfg.batch})   # changed "
                   "(per rank)")
    if model_lines:
        out.append("# on the model as built, before it is sharded or compiled:")
        out += list(model_lines)
    if cfg.matmul_precision != "as-set":
        tag = "   # changed" if "matmul_precision" in changed else ""
        out += [f'torch.set_float32_matmul_precision("{cfg.matmul_precision}")' + tag,
                f"torch.backends.cudnn.allow_tf32 = {cfg.matmul_precision != 'highest'}" + tag]
    if cfg.memory_format == "channels_last":
        tag = "   # changed" if "memory_format" in changed else ""
        out += ["model = model.to(memory_format=torch.channels_last)" + tag,
                "x = x.contiguous(memory_format=torch.channels_last)   # each 4-D input" + tag]
    if step and cfg.compiled:
        out.append("# your step compiles what it compiles (ctx.compile) with these arguments:")
    if cfg.compiled and cfg.backend == "eager":
        out.append('# backend="eager" is what ran: Dynamo traced and ran the graphs without '
                   "generating code (the\n# tutorials' CPU setting); leave backend out for "
                   "inductor's fused code")
    if cfg.compile == "off":
        out.append("# eager: no torch.compile" + ("   # changed" if "compile" in changed else ""))
    if cfg.dynamic == "mark" and cfg.compiled:
        out.append("torch._dynamo.mark_dynamic(x, 1)   # the varying dimension of each input, "
                   "before every call" + ("   # changed" if "dynamic" in changed else ""))
    out += [ln for ln in _wrapping(cfg, changed, blocks) if ln]
    if cfg.cudagraph == "manual":
        tag = "   # changed" if "cudagraph" in changed else ""
        out += ["# capture the step once (static shapes; x and target are static buffers)" + tag,
                "g = torch.cuda.CUDAGraph()", "with torch.cuda.graph(g):",
                "    loss = loss_fn(model(x), target)" if train else "    out = model(x)",
                "# each step: copy the batch into x " + ("and target, then" if train else
                                                           "then"), "g.replay()"]
    else:
        out += _autocast(cfg, changed, train)
    if train:
        out += _optimizer(cfg, changed)
    if not custom and cfg.resolved_schedule == "bucketed":
        out.append("# pad each batch's sequence length up to one of a few bucket lengths"
                   + ("   # changed" if "seq_schedule" in changed else ""))
    return "\n".join(_one_comment(ln) for ln in out) + "\n"


def _one_comment(line: str) -> str:
    """``code   # a   # changed`` -> ``code   # a; changed``."""
    parts = line.split("   # ")
    return line if len(parts) < 3 else parts[0] + "   # " + "; ".join(parts[1:])
