"""Engine side: the numeric settings a config sets for its run - fp32 matmul/convolution
precision (TF32 or full fp32) and the memory layout (channels_last) - and the full-precision
reference that check=True measures a precision change against."""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def matmul_precision(setting: str):
    """Within: fp32 matmuls and cuDNN convolutions at ``setting`` ('highest': full fp32,
    'high': TF32; 'as-set': untouched); after: what the process had. Process-global state,
    so it is set per run and put back: the next run's config decides, not this one's."""
    if setting == "as-set":
        yield
        return
    before = _get()
    _set(setting)
    try:
        yield
    finally:
        _restore(before)


def _get():
    import torch
    try:
        return "legacy", torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    except RuntimeError:
        # torch >= 2.9 refuses the legacy getter once a person's code set the per-backend
        # API (torch.backends.cuda.matmul.fp32_precision): read and set that one instead
        b = torch.backends
        return "backend", b.cuda.matmul.fp32_precision, b.cudnn.conv.fp32_precision


def _set(setting: str) -> None:
    import torch
    try:
        torch.set_float32_matmul_precision(setting)
        torch.backends.cudnn.allow_tf32 = setting != "highest"
    except RuntimeError:
        b = torch.backends
        b.cuda.matmul.fp32_precision = b.cudnn.conv.fp32_precision = (
            "ieee" if setting == "highest" else "tf32")


def _restore(before) -> None:
    import torch
    kind, a, b = before
    if kind == "legacy":
        torch.set_float32_matmul_precision(a)
        torch.backends.cudnn.allow_tf32 = b
    else:
        torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision = a, b


def full_precision():
    """What a precision change is checked against: fp32 matmuls and convolutions in full
    fp32 (no TF32)."""
    return matmul_precision("highest")


def to_channels_last(built) -> None:
    """The built model, and every 4-D floating tensor of its inputs, in channels_last
    (NHWC) layout, in place: cuDNN then runs its convolutions without converting layouts."""
    import torch
    cl = torch.channels_last
    built.model = built.model.to(memory_format=cl)
    make = built.make_batch

    def conv(x):
        if isinstance(x, torch.Tensor) and x.dim() == 4 and x.is_floating_point():
            return x.contiguous(memory_format=cl)
        if isinstance(x, (tuple, list)):
            return type(x)(conv(v) for v in x)
        return x

    def make_batch(i):
        inputs, target = make(i)
        return conv(inputs), target
    built.make_batch = make_batch
