"""The GPU side of a profiled step, per rank: what its kernels computed (kinds and dtypes,
analysis/kernels.py), the kernels that took most of it, how busy the SMs, the tensor cores
and DRAM were over the measured steps (NVML GPM, where the card has it) and the card's own
numbers to hold that against. ``run.why()`` prints it under the host's split; the rules
(advice/kernel_rules.py) read the same object. Pure."""
from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass, field

import pandas as pd

from nbtools.analysis import kernels as K
from nbtools.analysis.card import Card, card
from nbtools.common.units import finite_or_nan

# short names for the long ones (C++ signatures): the kernel, not its argument list
_CUT = 64


@dataclass(frozen=True)
class GpuReading:
    """One GPU rank's profiled step, read from its kernels."""
    rank: int
    busy_ms: float                                   # kernel time a profiled step (summed)
    window_ms: float = math.nan                      # the profiled step's span
    kinds: dict = field(default_factory=dict)        # kind -> share of busy_ms
    dtypes: dict = field(default_factory=dict)       # matmul+conv dtype -> share of busy_ms
    top: tuple = ()                                  # (name, kind, dtype, ms, calls, share)
    kernels: float = math.nan                        # kernels a profiled step
    sm_active_pct: float = math.nan
    tensor_active_pct: float = math.nan
    dram_bw_pct: float = math.nan
    card: Card | None = None

    @property
    def busy_share(self) -> float:
        """The kernels' time as a share of the profiled step (at most 1: streams overlap;
        1 where the step's span is unknown): what a faster kernel can save of the step."""
        if not self.window_ms > 0:
            return 1.0
        return min(1.0, self.busy_ms / self.window_ms)

    def share(self, kind: str) -> float:
        """The share of the kernel time that ``kind`` of work took (0 when none)."""
        return self.kinds.get(kind, 0.0)

    @property
    def matrix_share(self) -> float:
        """Matrix products and convolutions together."""
        return self.share("matmul") + self.share("conv")

    def dtype_share(self, *dtypes) -> float:
        """The share of the kernel time of matrix work (matmul, conv, attention) in these dtypes."""
        return sum(v for d, v in self.dtypes.items() if d in dtypes)

    @property
    def text(self) -> str:
        """The reading in sentences: kinds and dtypes, top kernels, GPM, the card."""
        kinds = ", ".join(f"{K.KIND_WORDS[k]} {_pct(v)}" + (self._dtype_words(k))
                          for k, v in self.kinds.items() if v >= 0.005)
        s = (f"rank {self.rank}: {self.busy_ms:.3g} ms of GPU work a profiled step"
             + (f" ({self.kernels:.0f} kernels)" if self.kernels == self.kernels else "")
             + f": {kinds or 'none'}")
        if self.top:
            s += "; top kernels: " + ", ".join(
                f"{short(n)} {_pct(sh)} ({k}{'' if d == '?' else ' ' + d}, {c:.0f}x)"
                for n, k, d, _ms, c, sh in self.top[:3])
        gpm = [(f"SMs active {v:.0f} %") if (v := self.sm_active_pct) == v else "",
               (f"tensor cores {v:.0f} %") if (v := self.tensor_active_pct) == v else "",
               (f"DRAM bandwidth {v:.0f} % of peak") if (v := self.dram_bw_pct) == v else ""]
        gpm = [g for g in gpm if g]
        if gpm:
            s += ". Over the measured steps (NVML GPM): " + ", ".join(gpm)
        if self.card is not None:
            s += f". Card: {self.card.text}"
        note = self._precision_note()
        return s + (f". {note}." if note else ".")

    def _dtype_words(self, kind: str) -> str:
        if kind not in ("matmul", "conv"):
            return ""
        mine = [(d, v) for d, v in self.dtypes.items() if v >= 0.005]
        return f" ({', '.join(f'{d} {_pct(v)}' for d, v in mine)})" if mine and kind == "matmul" else ""

    def _precision_note(self) -> str:
        fp32 = self.dtype_share("fp32")
        if fp32 < 0.2 or self.card is None:
            return ""
        c = self.card
        half = c.peaks.get(c.half, math.nan)
        lo = c.peaks.get("fp32", math.nan)
        ratio = (f" ({half:g} against {lo:g} TFLOP/s on the datasheet)"
                 if half == half and lo == lo else "")
        return (f"{_pct(fp32)} of the GPU's work is fp32 matrix products: they run on the "
                f"CUDA cores, not the tensor cores, which run {c.half}{ratio} and TF32 many "
                "times faster")


def readings(run) -> list:
    """One GpuReading per GPU rank with kernels in its profiled steps (empty on CPU ranks or
    without a profiled step)."""
    ev = run.events
    split = K.kernel_split(ev)
    if not len(split):
        return []
    top = K.top_kernels(ev, 5)
    sm = run.summary if run.summary is not None else pd.DataFrame()
    the_card = card(run)
    out = []
    for r, one in split.groupby("rank"):
        busy = float(one["ms"].sum())
        kinds = one.groupby("kind")["share"].sum().sort_values(ascending=False)
        row = sm[sm["rank"] == r].iloc[0] if len(sm) and "rank" in sm and (sm["rank"] == r).any() else {}
        g = (lambda k: finite_or_nan(row.get(k)) if len(row) else math.nan)  # noqa: E731
        mine = top[top["rank"] == r]
        out.append(GpuReading(
            rank=int(r), busy_ms=busy, window_ms=g("profiled_window_ms"),
            kinds={k: float(v) for k, v in kinds.items()},
            dtypes=K.matmul_dtypes(split, r),
            top=tuple((str(t.name), str(t.kind), str(t.dtype), float(t.ms), float(t.calls),
                       float(t.share)) for t in mine.itertuples()),
            kernels=float(one["kernels"].sum()),
            sm_active_pct=g("sm_active_pct"), tensor_active_pct=g("tensor_active_pct"),
            dram_bw_pct=g("dram_bw_pct"), card=the_card))
    return out


def short(name: str) -> str:
    """A kernel's name without its C++ return type, namespace noise and argument list."""
    n = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    n = re.sub(r"^std::enable_if<.*?>::type\s+", "", n)
    # CUTLASS wraps its kernels: the name that says what it is is the template argument
    wrapped = re.match(r"cutlass::Kernel2?<(\w+)>", n)
    if wrapped:
        n = wrapped.group(1)
    n = n.replace("at::native::", "").split("(", 1)[0].strip()
    if "multi_tensor_apply" in n:
        return "multi_tensor_apply<…> (foreach: an optimizer's or _foreach ops)"
    if "<" in n:
        n = n.split("<", 1)[0] + "<…>"
    return n if len(n) <= _CUT else n[:_CUT - 1] + "…"


def html_of(rs: list) -> str:
    """The readings as an HTML list (the report, the panel)."""
    return "<ul>" + "".join(f"<li>{html.escape(r.text)}</li>" for r in rs) + "</ul>" if rs else ""



def _pct(x: float) -> str:
    return f"{100 * x:.0f} %" if x == x else "?"
