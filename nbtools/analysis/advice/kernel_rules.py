"""Advice from what the GPU computed (analysis/gpu_reading.py): matrix work in fp32 or TF32
where the card's tensor cores run 16-bit many times faster (autocast, TF32), convolutions
in NCHW that cuDNN converts around each call (channels_last), attention written by hand
(SDPA), and a compiled step whose time is matrix products (max-autotune). A precision move
changes the numbers: its suggestion says so (``changes_numbers``), and lab.explore keeps it
only with the loss checked against full fp32 beside its speed. Pure: no torch."""
from __future__ import annotations

import math

from nbtools.analysis import kernels as K
from nbtools.analysis.advice.suggestion import Suggestion, ab_cost
from nbtools.analysis.gpu_reading import readings, short

MATRIX_SHARE = 0.25
"""Matrix work (products and convolutions) in fp32/TF32 at least this share of the GPU's
kernel time: worth a precision screen. On 1 x H100 an fp32 GPT step (d 1024, 8 layers)
spent most of its kernel time in fp32 GEMMs and ran 5.1x faster under bf16 autocast."""
CONV_SHARE = 0.20
ATTENTION_MATMUL = 0.10
AUTOTUNE_SHARE = 0.50
"""A compiled step whose kernel time is at least half matrix products: max-autotune's
GEMM search has something to find (it costs minutes of compile)."""


def _gpu_ranks(run) -> list:
    return [r for r in readings(run) if r.busy_ms > 0]


def _worst(rs, key):
    return max(rs, key=key) if rs else None


def _own_step(run) -> bool:
    return any(isinstance(m, dict) and m.get("own_step") for m in (run.ranks or {}).values())


def _rate_gain(card, dtype: str, to: str) -> float:
    """1 - (rate in dtype / rate in ``to``) from the card's datasheet peaks: the share of a
    kernel's time the move could save at best (0.5 when the card is not in the table)."""
    if card is None:
        return 0.5
    a, b = card.peaks.get(dtype, math.nan), card.peaks.get(to, math.nan)
    return 1 - a / b if a == a and b == b and b > 0 else 0.5


def precision(run) -> list[Suggestion]:
    """Matrix work in fp32 (CUDA cores) or TF32 takes at least MATRIX_SHARE of the GPU's
    kernel time and autocast is off: autocast to the card's 16-bit dtype (bf16, fp16 where
    the card has no bf16); and for fp32 matrix work, TF32 (matmul_precision='high') as the
    smaller change. Score: the at-stake share times the best-case saving from the card's
    peaks (fp32 -> bf16 on an H100: 93 %), of the share of the step the kernels fill."""
    cfg = run.config
    if cfg is None:
        return []
    rs = _gpu_ranks(run)
    r = _worst(rs, lambda x: x.dtype_share("fp32", "tf32"))
    if r is None:
        return []
    fp32, tf32 = r.dtype_share("fp32"), r.dtype_share("tf32")
    if fp32 + tf32 < MATRIX_SHARE:
        return []
    c = r.card
    half = c.half if c is not None else "bf16"
    ranks = tuple(x.rank for x in rs if x.dtype_share("fp32", "tf32") >= MATRIX_SHARE)
    top = next(((n, d) for n, k, d, *_ in r.top if k in ("matmul", "conv") and d in ("fp32", "tf32")),
               None)
    seen = (f"rank {r.rank}: matrix work in fp32 {_pct(fp32)}"
            + (f" and TF32 {_pct(tf32)}" if tf32 >= 0.005 else "")
            + f" of {r.busy_ms:.3g} ms of kernels a profiled step"
            + (f" (the largest: {short(top[0])}, {top[1]})" if top else "")
            + (f"; tensor cores active {r.tensor_active_pct:.0f} % over the measured steps "
               "(NVML GPM)" if r.tensor_active_pct == r.tensor_active_pct else ""))
    if c is not None and c.peaks:
        seen += (f"; on the {c.name}: " + ", ".join(f"{c.peaks[d]:g} TFLOP/s {d}" for d in
                                                     ("fp32", "tf32", half) if d in c.peaks))
    out = []
    numbers = ("It changes the numbers: lab.explore keeps it only when the first step's loss "
               "(or output) stays within its tolerance of the full-fp32 eager one (check=True "
               "measures it); read the difference it reports before you adopt it.")
    if cfg.autocast == "off":
        out.append(Suggestion(
            rule="autocast", title=f"Run the matrix work in {half} (autocast)",
            change={"autocast": half}, evidence=seen,
            why=(f"fp32 products run on the CUDA cores and TF32 at half the 16-bit rate; "
                 f"under autocast matmuls and convolutions run in {half} on the tensor cores "
                 "while reductions, norms and the loss stay fp32. " + numbers),
            code=(f"with torch.autocast('cuda', dtype=torch.{'bfloat16' if half == 'bf16' else 'float16'}):\n"
                  "    loss = loss_fn(model(x), target)\nloss.backward()"
                  + ("\n# fp16: scale the loss (torch.amp.GradScaler) against underflow"
                     if half == "fp16" else "")),
            cost=ab_cost("a recompile if compiled, then") + "; plus a numerics check (one step)",
            about="precision", ranks=ranks, changes_numbers=True,
            score=min(0.95, r.busy_share * (fp32 * _rate_gain(c, "fp32", half)
                                            + tf32 * _rate_gain(c, "tf32", half)))))
    if fp32 >= MATRIX_SHARE and cfg.matmul_precision != "high":
        out.append(Suggestion(
            rule="tf32", title="Let fp32 matrix products use TF32 (matmul_precision='high')",
            change={"matmul_precision": "high"}, evidence=seen,
            why=("TF32 keeps fp32 storage and range and rounds the products' inputs to 10 "
                 "mantissa bits on the tensor cores: a smaller change than autocast, for "
                 "what stays fp32. " + numbers),
            code='torch.set_float32_matmul_precision("high")\ntorch.backends.cudnn.allow_tf32 = True',
            cost=ab_cost("a recompile if compiled, then") + "; plus a numerics check (one step)",
            about="tf32", ranks=ranks, changes_numbers=True,
            # below autocast where both apply: 16-bit is the larger saving
            score=0.8 * r.busy_share * fp32 * _rate_gain(c, "fp32", "tf32")))
    return out


def channels_last(run) -> list[Suggestion]:
    """Convolutions take at least CONV_SHARE of the kernel time and run NCHW (cuDNN's
    nchw/nhwc conversion kernels, or NCHW in the kernels' names): channels_last. Score: the
    conversions' share plus half the NCHW convolutions' (a guess at what NHWC saves)."""
    cfg = run.config
    if cfg is None or cfg.memory_format == "channels_last":
        return []
    rs = _gpu_ranks(run)
    lay = K.layout_converts(run.events)
    best = None
    for r in rs:
        row = lay[lay["rank"] == r.rank]
        if not len(row) or r.share("conv") < CONV_SHARE:
            continue
        conv_ms, conv_ms_nchw = float(row["convert_ms"].iloc[0]), float(row["conv_nchw_ms"].iloc[0])
        if conv_ms <= 0 and conv_ms_nchw <= 0:
            continue
        score = r.busy_share * (conv_ms + 0.5 * conv_ms_nchw) / r.busy_ms
        if best is None or score > best[0]:
            best = (score, r, conv_ms, conv_ms_nchw)
    if best is None:
        return []
    score, r, conv_ms, nchw_ms = best
    own = _own_step(run)
    return [Suggestion(
        rule="channels-last", title="Put the model and its images in channels_last (NHWC)",
        change={} if own else {"memory_format": "channels_last"},
        evidence=(f"rank {r.rank}: convolutions {_pct(r.share('conv'))} of {r.busy_ms:.3g} ms of "
                  f"kernels a profiled step; {conv_ms:.3g} ms in cuDNN's NCHW<->NHWC "
                  f"conversions and {nchw_ms:.3g} ms in NCHW convolutions"),
        why=("cuDNN's tensor-core convolutions work in NHWC: an NCHW model has its tensors "
             "converted before and after each convolution, or runs slower NCHW kernels."),
        code=("model = model.to(memory_format=torch.channels_last)\n"
              "x = x.contiguous(memory_format=torch.channels_last)"),
        cost=ab_cost("a rebuild of the model, then"), about="layout",
        score=min(0.9, score), ranks=(r.rank,))]


def hand_attention(run) -> list[Suggestion]:
    """Softmax kernels (not a loss's log-softmax) beside matrix products and no attention
    kernel: attention written by hand, q @ k.T, softmax, @ v, with the scores tensor
    written to memory and read back. SDPA (FlashAttention / memory-efficient / cuDNN) does
    it in one kernel. A change in the model's code: score the softmax's share, doubled for
    the matmuls and the scores' memory traffic around it, at most 0.5."""
    rs = _gpu_ranks(run)
    att = K.hand_attention(run.events)
    for r in sorted(rs, key=lambda x: -x.share("matmul")):
        row = att[att["rank"] == r.rank]
        if not len(row) or r.share("matmul") < ATTENTION_MATMUL:
            continue
        soft, soft_ms = float(row["softmax"].iloc[0]), float(row["softmax_ms"].iloc[0])
        if soft < 1 or float(row["attention"].iloc[0]) > 0:
            continue
        return [Suggestion(
            rule="sdpa", title="Use scaled_dot_product_attention for the attention",
            change={},
            evidence=(f"rank {r.rank}: {soft:.0f} softmax kernels a profiled step "
                      f"({soft_ms:.3g} ms, {_pct(soft_ms / r.busy_ms)} of the kernels) beside "
                      f"matrix products ({_pct(r.share('matmul'))}), and no attention kernel: "
                      "attention computed as matmul, softmax, matmul"),
            why=("Hand-written attention writes the (sequence x sequence) scores to memory "
                 "and reads them back for the softmax and the second product; SDPA's fused "
                 "kernels keep them on chip and skip masked blocks."),
            code=("import torch.nn.functional as F\n"
                  "# instead of: w = (q @ k.transpose(-2, -1)) / math.sqrt(d); "
                  "w = w.masked_fill(mask, -inf).softmax(-1); out = w @ v\n"
                  "out = F.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
                  "# a Hugging Face model: from_pretrained(..., attn_implementation='sdpa')"),
            cost=ab_cost("an edit, then"), about="attention",
            score=min(0.5, 2 * r.busy_share * soft_ms / r.busy_ms), ranks=(r.rank,))]
    return []


def max_autotune(run) -> list[Suggestion]:
    """A compiled step (default or reduce-overhead mode) whose kernel time is at least
    AUTOTUNE_SHARE matrix products: max-autotune benchmarks GEMM tilings (and Triton
    templates) for each shape. Score: a tenth of the matrix share (it seldom gains more than
    10-20 %, and costs a long compile)."""
    cfg = run.config
    if cfg is None or cfg.backend != "inductor" or cfg.compile not in ("default", "reduce-overhead"):
        return []
    rs = _gpu_ranks(run)
    r = _worst(rs, lambda x: x.share("matmul"))
    if r is None or r.share("matmul") < AUTOTUNE_SHARE:
        return []
    to = "max-autotune" if cfg.compile == "reduce-overhead" else "max-autotune-no-cudagraphs"
    return [Suggestion(
        rule="max-autotune", title=f"Let inductor search GEMM kernels (compile='{to}')",
        change={"compile": to},
        evidence=(f"rank {r.rank}: matrix products {_pct(r.share('matmul'))} of {r.busy_ms:.3g} "
                  "ms of kernels a profiled step, compiled in mode "
                  f"'{cfg.compile}'"),
        why=("max-autotune times several GEMM tilings and Triton templates for each shape at "
             "compile time and keeps the fastest; it pays where matrix products dominate."),
        code=f'model = torch.compile(model, mode="{to}")',
        cost=ab_cost("a long compile (minutes: every GEMM shape is benchmarked), then"),
        about="autotune", score=0.1 * r.busy_share * r.share("matmul"), ranks=(r.rank,))]


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %" if x == x else "?"


RULES = (precision, channels_last, hand_attention, max_autotune)
