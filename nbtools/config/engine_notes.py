"""What an engine notes about how it built a run (``run.ranks[r]["notes"]``) that the
advice and the code read back: whether FSDP2 had blocks to shard, which optimizer the
step used. The engine writes these lines, the client reads them; one place keeps both
sides' words the same."""
from __future__ import annotations

NO_BLOCKS_NOTE = "no blocks: fully_shard on the whole model only"
"""FSDP2 sharded the model as one unit (a Workload without ``blocks=``)."""
OPTIMIZER_NOTE = "optimizer: "
"""Followed by the optimizer's class name (``type(opt).__name__``)."""

FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adagrad")
"""torch's optimizers that take fused=True."""
FUSED_ON_DTENSOR = ("Adam", "AdamW")
"""Those whose fused kernel DTensor can run (torch.distributed.tensor registers sharding
for _fused_adam(w)_ only: fused SGD on FSDP2 or TP parameters fails with "does not have a
sharding strategy registered", seen on 2 gloo ranks with torch 2.13)."""


def _notes(run) -> list:
    return [n for r in (getattr(run, "ranks", None) or {}).values() if isinstance(r, dict)
            for n in (r.get("notes") or []) if isinstance(n, str)]


def sharded_whole(run) -> bool:
    """``run``'s FSDP2 model was sharded as one unit (no blocks), by its ranks' notes."""
    return any(NO_BLOCKS_NOTE in n for n in _notes(run))


def optimizer_name(run) -> str | None:
    """The class name of the optimizer ``run``'s step used (None: not noted, e.g. a run
    saved before the engines noted it, or a step of one's own)."""
    for n in _notes(run):
        if n.startswith(OPTIMIZER_NOTE):
            return n[len(OPTIMIZER_NOTE):]
    return None


def fused_refusal(run, parallel: str) -> str:
    """Why optimizer_impl='fused' cannot run for ``run`` ("" when it can, or when the
    optimizer is not known)."""
    name = optimizer_name(run)
    if name is None:
        return ""
    if name not in FUSED_OPTIMIZERS:
        return (f"{name} takes no fused=True (torch's Adam, AdamW, SGD and Adagrad do)")
    if parallel in ("fsdp2", "tp") and name not in FUSED_ON_DTENSOR:
        return (f"{name}'s fused kernel has no DTensor sharding rule, so it cannot run on "
                f"{parallel}'s sharded parameters (fused Adam and AdamW can)")
    return ""


def fused_line(run) -> str:
    """The script's line for ``run``'s optimizer made with fused=True."""
    return f"opt = torch.optim.{optimizer_name(run) or 'AdamW'}(model.parameters(), lr=lr, fused=True)"
