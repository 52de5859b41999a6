"""StepConfig.optimizer_impl on a rank: a person's optimizer made again with foreach=True or
fused=True, from what its own constructor takes.

An optimizer's ``defaults`` and ``param_groups`` hold more than its constructor accepts:
torch's AdamW passes ``decoupled_weight_decay=True`` to Adam's constructor and keeps it
in both, but its own ``__init__`` has no such parameter (torch 2.11-2.13), so passing the
groups' settings back as keywords failed ("AdamW.__init__() got an unexpected keyword
argument 'decoupled_weight_decay'", a Hugging Face-built AdamW on 1 x H100). The keywords
therefore come from the constructor's signature, their values from ``defaults``."""
from __future__ import annotations

import inspect

import torch

IMPLS = ("foreach", "fused")


def constructor_params(cls) -> set:
    """The keyword names ``cls(params, ...)`` accepts: its ``__init__``'s parameters, and
    where that takes ``**kwargs`` (a subclass passing them on), its bases' too."""
    names: set = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            sig = inspect.signature(init)
        except (TypeError, ValueError):
            break
        more = False
        for i, p in enumerate(sig.parameters.values()):
            if p.kind is p.VAR_KEYWORD:
                more = True
            elif p.kind is not p.VAR_POSITIONAL and i >= 2:      # past self, params
                names.add(p.name)
        if not more or klass is torch.optim.Optimizer:
            break
    return names


def remade(opt: torch.optim.Optimizer, impl: str) -> torch.optim.Optimizer:
    """The same optimizer (class, groups, settings) made again with ``impl=True`` (foreach
    or fused). Before its first step it holds no state, so nothing is lost. A group keeps
    its own values (a no-decay group's weight_decay=0) and its own keys (a name); a
    setting the constructor derives itself (AdamW's decoupled_weight_decay) is left to it."""
    cls = type(opt)
    takes = constructor_params(cls)
    if impl not in takes:
        raise RuntimeError(
            f"optimizer_impl={impl!r}: {cls.__name__}'s constructor takes no {impl}= "
            f"(it takes {', '.join(sorted(takes)) or 'nothing but the parameters'}); "
            "leave optimizer_impl='as-built' for it")
    kw = {k: v for k, v in opt.defaults.items() if k in takes and k not in IMPLS}
    kw.update({i: i == impl for i in IMPLS if i in takes})
    derived = set(opt.defaults) - takes
    groups = [{k: v for k, v in g.items() if k not in IMPLS and k not in derived}
              for g in opt.param_groups]
    try:
        return cls(groups, **kw)
    except (TypeError, RuntimeError, ValueError) as e:
        raise RuntimeError(
            f"optimizer_impl={impl!r}: {cls.__name__} could not be made with "
            f"{impl}=True ({str(e).splitlines()[0] if str(e) else type(e).__name__}); "
            "torch's Adam, AdamW, SGD and Adagrad take fused=True, most others "
            "foreach=True: leave optimizer_impl='as-built' for this one") from e
