"""What the GPU spent its profiled steps on: every kernel, copy and collective on a GPU lane
named by kind of work (matrix products, convolutions, attention, elementwise/reductions,
memory copies, communication) and, where its name says, the dtype it computed in. The
kernel names are the libraries' own (cuBLAS/cuBLASLt, cuDNN, CUTLASS, FlashAttention,
inductor's Triton, ATen); a name that says no dtype reads "?" rather than a guess.
Pure: the run's events table in, tables out."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

KINDS = ("matmul", "conv", "attention", "elementwise", "memory", "comm", "other")
KIND_WORDS = {"matmul": "matrix products", "conv": "convolutions", "attention": "attention",
              "elementwise": "elementwise/reductions", "memory": "memory copies",
              "comm": "communication", "other": "other kernels"}
GPU_WORK = ("compute", "memcpy", "memset", "communication")

# Order matters: attention kernels carry "fprop"/"gemm" in their names, conv kernels "gemm".
_ATTENTION = re.compile(r"flash|fmha|sdpa|attention|attn|compute_dot_do_o", re.I)
_CONV = re.compile(r"conv(?!ert)|fprop|dgrad|wgrad|implicit_gemm|winograd|implicit_convolve|"
                   r"precomputed_convolve|nchwToNhwc|nhwcToNchw|im2col|col2im|"
                   # cuDNN's FFT convolutions (fp32 without TF32 picks them)
                   r"fft2d|fft_|flip_filter|pointwise_mult_and_sum_complex", re.I)
_MATMUL = re.compile(r"gemm|gemv|nvjet|cutlass|_mm_|_bmm|triton_tem_|"
                     r"splitKreduce|dot_kernel|matmul", re.I)
_ELEMENTWISE = re.compile(r"elementwise|reduce|triton_(?:poi|red|per)_|multi_tensor_apply|"
                          r"norm|softmax|cunn_|copy|fill|index|gather|scatter|cat_|"
                          r"at::native|dropout|embedding|sum|mean|arange|where|bn_fw|bn_bw", re.I)

# dtype tokens in kernel names, checked in order (the first that matches)
_DTYPES = (
    ("fp8", re.compile(r"e4m3|e5m2|fp8|f8f8", re.I)),
    ("int8", re.compile(r"i8i8|int8|imma", re.I)),
    ("tf32", re.compile(r"tf32|tensorop_s1688|tensorop_s16816|_s1688gemm|xmma.*_tf32", re.I)),
    ("bf16", re.compile(r"bf16|bfloat16|BFloat16", re.I)),
    ("fp16", re.compile(r"f16|fp16|h1688|h16816|hgemm|half|__half|_h884|884gemm", re.I)),
    ("fp32", re.compile(r"f32f32_f32f32_f32|sgemm|ffma|_f32_|<float|float>|gemmSN_|gemv2T_kernel_val<int, int, float", re.I)),
)
# cuBLASLt's nvjet kernels name their operand dtypes by letters: nvjet_[sm90_]<a><compute><d>
# (h: fp16, t: bf16, s: fp32; e/q: fp8) - bf16 autocast on H100/H200 runs nvjet_sm90_tst_*
_NVJET = re.compile(r"nvjet_(?:sm\d+_)?([a-z])([a-z])([a-z])_")
_NVJET_LETTER = {"h": "fp16", "t": "bf16", "s": "fp32", "e": "fp8", "q": "fp8"}
HALF = ("bf16", "fp16", "fp8", "int8")


def classify(name: str, category: str = "compute") -> tuple[str, str]:
    """(kind, dtype) of one GPU event by its category and name; dtype '?' when the name
    does not say (inductor's Triton kernels never do)."""
    if category in ("memcpy", "memset"):
        return "memory", "?"
    if category == "communication" or name.startswith("nccl"):
        return "comm", _dtype(name)
    if _ATTENTION.search(name):
        return "attention", _dtype(name)
    if _CONV.search(name):
        return "conv", _dtype(name)
    if _MATMUL.search(name):
        return "matmul", _dtype(name)
    if _ELEMENTWISE.search(name):
        return "elementwise", _dtype(name)
    return "other", _dtype(name)


def _dtype(name: str) -> str:
    m = _NVJET.search(name)
    if m and m.group(1) in _NVJET_LETTER:
        # nvjet's "s" operands on a tensor-core kernel are TF32 when matmul precision allows
        # it; the name does not tell the two apart, so fp32 is what it says
        return _NVJET_LETTER[m.group(1)]
    for dtype, pat in _DTYPES:
        if pat.search(name):
            return dtype
    return "?"


def gpu_kernels(events: pd.DataFrame) -> pd.DataFrame:
    """The GPU work of the profiled steps, one row per event: rank, step, name, kind, dtype,
    dur_ns (classified once per distinct name)."""
    cols = ["rank", "step", "name", "kind", "dtype", "dur_ns"]
    if events is None or not len(events) or "lane" not in events:
        return pd.DataFrame(columns=cols)
    ev = events[events["category"].isin(GPU_WORK) & (events["step"] >= 0)
                & events["lane"].astype(str).str.startswith("cuda")]
    if not len(ev):
        return pd.DataFrame(columns=cols)
    names = ev["name"].astype(str)
    cats = ev["category"].astype(str)
    keys = pd.Series(list(zip(cats, names)), index=ev.index)
    table = {k: classify(k[1], k[0]) for k in set(keys)}
    kd = keys.map(table)
    return pd.DataFrame({"rank": ev["rank"].to_numpy(), "step": ev["step"].to_numpy(),
                         "name": names.to_numpy(), "kind": [k for k, _ in kd],
                         "dtype": [d for _, d in kd], "dur_ns": ev["dur_ns"].to_numpy(np.int64)})


def kernel_split(events: pd.DataFrame) -> pd.DataFrame:
    """Per rank, kind and dtype: ms a profiled step (mean over the rank's profiled steps),
    kernels a step, and share of the rank's GPU work time (kernels summed, so overlapping
    streams count each). Sorted by rank, then time."""
    k = gpu_kernels(events)
    cols = ["rank", "kind", "dtype", "ms", "kernels", "share"]
    if not len(k):
        return pd.DataFrame(columns=cols)
    steps = k.groupby("rank")["step"].nunique()
    g = k.groupby(["rank", "kind", "dtype"]).agg(ns=("dur_ns", "sum"), n=("dur_ns", "size"))
    g = g.reset_index()
    per = g["rank"].map(steps).to_numpy(np.float64)
    g["ms"] = g["ns"].to_numpy(np.float64) / 1e6 / per
    g["kernels"] = g["n"].to_numpy(np.float64) / per
    g["share"] = g["ns"] / g.groupby("rank")["ns"].transform("sum")
    return g.sort_values(["rank", "ms"], ascending=[True, False])[cols].reset_index(drop=True)


def top_kernels(events: pd.DataFrame, n: int = 5) -> pd.DataFrame:
    """Per rank, the n kernels (by name) that took the most GPU time: rank, name, kind,
    dtype, ms a profiled step, calls a step, share of the rank's GPU work time."""
    k = gpu_kernels(events)
    cols = ["rank", "name", "kind", "dtype", "ms", "calls", "share"]
    if not len(k):
        return pd.DataFrame(columns=cols)
    steps = k.groupby("rank")["step"].nunique()
    g = k.groupby(["rank", "name", "kind", "dtype"]).agg(ns=("dur_ns", "sum"),
                                                         c=("dur_ns", "size")).reset_index()
    per = g["rank"].map(steps).to_numpy(np.float64)
    g["ms"] = g["ns"].to_numpy(np.float64) / 1e6 / per
    g["calls"] = g["c"].to_numpy(np.float64) / per
    g["share"] = g["ns"] / g.groupby("rank")["ns"].transform("sum")
    g = g.sort_values(["rank", "ns"], ascending=[True, False])
    return g.groupby("rank").head(n)[cols].reset_index(drop=True)


def matmul_dtypes(split: pd.DataFrame, rank: int) -> dict:
    """{dtype: share of the rank's GPU work} of its matrix work: products, convolutions
    and attention (all three run on the tensor cores in 16-bit, on the CUDA cores in fp32)."""
    s = split[(split["rank"] == rank) & split["kind"].isin(("matmul", "conv", "attention"))]
    return {d: float(v) for d, v in s.groupby("dtype")["share"].sum()
            .sort_values(ascending=False).items()}


def layout_converts(events: pd.DataFrame) -> pd.DataFrame:
    """Per rank: ms a profiled step in cuDNN's NCHW<->NHWC conversion kernels and in
    convolutions that ran NCHW (their names say nchw / the conversions are there): what
    channels_last removes. Columns rank, convert_ms, conv_nchw_ms, conv_ms."""
    k = gpu_kernels(events)
    cols = ["rank", "convert_ms", "conv_nchw_ms", "conv_ms"]
    if not len(k):
        return pd.DataFrame(columns=cols)
    conv = k[k["kind"] == "conv"]
    rows = []
    for r, one in conv.groupby("rank"):
        steps = max(1, int(k.loc[k["rank"] == r, "step"].nunique()))
        nm = one["name"].str
        convert = nm.contains(r"nchwToNhwc|nhwcToNchw", case=False)
        nchw = nm.contains(r"nchw", case=False) & ~convert & ~nm.contains("nhwc", case=False)
        rows.append(dict(rank=int(r), convert_ms=one.loc[convert, "dur_ns"].sum() / 1e6 / steps,
                         conv_nchw_ms=one.loc[nchw, "dur_ns"].sum() / 1e6 / steps,
                         conv_ms=one.loc[~convert, "dur_ns"].sum() / 1e6 / steps))
    return pd.DataFrame(rows, columns=cols)


def hand_attention(events: pd.DataFrame) -> pd.DataFrame:
    """Per rank: softmax kernels (not log-softmax: a loss's) and attention kernels a
    profiled step, and the ms of each. Softmax with batched matrix products and no attention
    kernel is attention written by hand (q @ k.T, softmax, @ v): what SDPA replaces.
    Columns rank, softmax, softmax_ms, attention, attention_ms."""
    k = gpu_kernels(events)
    cols = ["rank", "softmax", "softmax_ms", "attention", "attention_ms"]
    if not len(k):
        return pd.DataFrame(columns=cols)
    rows = []
    for r, one in k.groupby("rank"):
        steps = max(1, int(one["step"].nunique()))
        nm = one["name"].str
        soft = nm.contains("softmax", case=False) & ~nm.contains(r"log_?softmax|LogSoftMax",
                                                                 case=False)
        # softmax_warp_forward<in, out, acc, log2_elements, is_log_softmax, is_masked>
        soft &= ~nm.contains(r"softmax_warp_\w+<[^>]*?,\s*\d+,\s*true", case=False)
        att = one["kind"] == "attention"
        rows.append(dict(rank=int(r), softmax=soft.sum() / steps,
                         softmax_ms=one.loc[soft, "dur_ns"].sum() / 1e6 / steps,
                         attention=att.sum() / steps,
                         attention_ms=one.loc[att, "dur_ns"].sum() / 1e6 / steps))
    return pd.DataFrame(rows, columns=cols)
