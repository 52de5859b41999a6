"""engine: a torch error from a Workload's own batch or loss, said as that (the message
names Workload.batch or Workload.loss and what they gave), not as a bare torch error."""
from __future__ import annotations

import re

import torch

from nbtools.config.step_config import ConfigError


def describe(x) -> str:
    """A value in a few words for an error message: ``float32[8,16]`` for a tensor, the
    parts of a short list or tuple, else its type's name."""
    if isinstance(x, torch.Tensor):
        return f"{str(x.dtype).removeprefix('torch.')}[{','.join(map(str, x.shape))}]"
    if isinstance(x, (list, tuple)) and len(x) <= 4:
        return f"{type(x).__name__}({', '.join(describe(v) for v in x)})"
    return type(x).__name__


# what torch says when the inputs do not fit (type, dtype, shape, device); anything else (a
# bug in the model, out of memory, a peer's abort, a graph break under fullgraph) is left as
# it is, so it is not blamed on the batch
_FIT = re.compile(r"must be Tensor|argument|dtype|shape|size|device|Expected|mat\d|"
                  r"cannot be multiplied|same type|not supported for", re.I)
_NOT_FIT = re.compile(r"out of memory|peer|Connection|process group|NCCL|gloo|graph break",
                      re.I)


def blames_batch(e: Exception, inputs) -> bool:
    """True when the model's failure reads as inputs that do not fit it (shapes, dtypes,
    devices), so the error points at Workload.batch rather than the model."""
    if any(not isinstance(x, torch.Tensor) for x in inputs):
        return not _NOT_FIT.search(str(e))
    text = str(e)
    return bool(_FIT.search(text)) and not _NOT_FIT.search(text) and \
        type(e).__name__ not in ("Unsupported", "UserError", "OutOfMemoryError")


def forward_failed(e: Exception, inputs) -> ConfigError:
    """The model raised on the batch's inputs. Only built on the error path: a step that
    runs costs nothing here."""
    args = ", ".join(f"x{i}: {describe(x)}" for i, x in enumerate(inputs))
    odd = [i for i, x in enumerate(inputs) if not isinstance(x, torch.Tensor)]
    hint = (f"input(s) {odd} are not tensors: make Workload.batch return tensors"
            if odd else "check that Workload.batch's inputs have the dtype, shape and "
            "device the model takes")
    return ConfigError(f"the model failed on Workload.batch's inputs ({args}): "
                       f"{type(e).__name__}: {_first_line(e)}. {hint}.")


def blames_loss(e: Exception) -> bool:
    """True when a loss failure reads as the loss's own (not out of memory or the runtime's)."""
    return not _NOT_FIT.search(str(e)) and type(e).__name__ != "OutOfMemoryError"


def loss_failed(e: Exception, out, target) -> ConfigError:
    """The ConfigError for a failed Workload.loss: what it got (output and target) and what
    to check."""
    return ConfigError(f"Workload.loss(output, target) failed (output: {describe(out)}, target: "
                       f"{describe(target)}): {type(e).__name__}: {_first_line(e)}. Check "
                       "Workload.loss, and that Workload.batch's target fits the model's output.")


def check_loss(loss) -> None:
    """backward() needs one number; a per-element loss (reduction='none') or a non-tensor
    otherwise fails inside autograd with no word of the Workload. Metadata only: no sync."""
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise ConfigError(f"Workload.loss returned {describe(loss)}; training needs one number "
                          "(a tensor with one element): reduce it, e.g. "
                          "F.mse_loss(out, target) with reduction='mean', or loss.mean()")


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else ""
