"""The GPU side of a step, read from kernels the cards really ran (issue 51): kinds and dtypes
of H100 kernel names, the reading of recorded H200 runs, the rules that read it, and the
numerics a precision move is kept on. Pure: recorded tables in."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from nbtools import StepConfig
from nbtools.analysis import kernels as K
from nbtools.analysis.advice import advise, kernel_rules
from nbtools.analysis.card import Card, card, peak_tflops
from nbtools.analysis.gpu_reading import readings, short
from nbtools.analysis.numerics import NUMERICS_TOLERANCE, numerics
from support.paths import FIXTURES

FIX = FIXTURES
H100 = {"gpu": "NVIDIA H100 80GB HBM3", "gpu_sms": 132, "gpu_cc": "9.0"}
MACHINE = {"machine": {"sm_max_mhz": 1980.0, "mem_max_mhz": 2619.0, "mem_bus_bits": 5120.0}}


def _names() -> pd.DataFrame:
    rows = [ln.rstrip("\n").split("\t") for ln in (FIX / "h100_kernel_names.tsv").open()
            if not ln.startswith("#")]
    return pd.DataFrame(rows, columns=["case", "us", "name"]).astype({"us": float})


def _cat(name: str) -> str:
    return "memset" if name.startswith("Memset") else "compute"


# (case in the probe, kind, dtype) of its largest kernel, as the H100 named it
LARGEST = [
    ("mm fp32 highest", "matmul", "fp32"),      # sm80_xmma_gemm_f32f32_f32f32_f32 ... ffma
    ("mm fp32 high", "matmul", "tf32"),         # sm90_xmma_gemm_f32f32_tf32f32_f32
    ("mm bf16", "matmul", "bf16"),              # nvjet_sm90_tst_*
    ("mm fp16", "matmul", "fp16"),              # nvjet_sm90_hsh_*
    ("mm autocast bf16", "matmul", "bf16"),
    ("linear fp32", "matmul", "fp32"),
    ("bmm fp32", "matmul", "fp32"),             # cutlass::Kernel2<cutlass_80_simt_sgemm_*>
    ("conv fp32 cudnn_tf32=True", "conv", "tf32"),
    ("conv fp32 cudnn_tf32=False", "conv", "fp32"),   # cuDNN's FFT kernels, on float2
    ("conv bf16 channels_last", "conv", "bf16"),
    ("sdpa torch.float32", "attention", "fp32"),
    ("sdpa torch.bfloat16", "attention", "fp16"),  # cuDNN's "f16" covers bf16 too
    ("hand attention torch.float32", "matmul", "fp32"),
    ("gelu+sum fp32", "elementwise", "?"),      # the probe cut the name before its <float>
    ("compiled mlp bf16 default", "matmul", "bf16"),
    ("compiled mlp bf16 max-autotune-no-cudagraphs", "matmul", "?"),   # triton_tem_*addmm
]


@pytest.mark.parametrize("case,kind,dtype", LARGEST)
def test_the_largest_kernel_of_each_probe_case_is_named_by_kind_and_dtype(case, kind, dtype):
    one = _names()
    one = one[one["case"] == case].sort_values("us", ascending=False)
    assert len(one), case
    name = one["name"].iloc[0]
    assert K.classify(name, _cat(name)) == (kind, dtype), name


def test_no_probe_kernel_is_left_as_other_and_copies_are_memory():
    n = _names()
    got = {name: K.classify(name, _cat(name)) for name in n["name"]}
    assert not [k for k, v in got.items() if v[0] == "other"]
    assert got["Memset (Device)"] == ("memory", "?")
    # a loss's log-softmax is no attention, a softmax between two products is
    soft = [k for k in got if "softmax_warp_forward" in k]
    assert soft and all(got[k][0] == "elementwise" for k in soft)


def test_short_names_keep_what_the_kernel_is():
    assert short("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>("
                 "cutlass_80_simt_sgemm_256x128_8x4_nn_align1::Params)") == \
        "cutlass_80_simt_sgemm_256x128_8x4_nn_align1"
    assert short("void (anonymous namespace)::softmax_warp_forward<float, float, float, 9, "
                 "false, false>(float*, float const*, int)") == "softmax_warp_forward<…>"
    assert short("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, "
                 "float>(x)").startswith("internal::gemvx::kernel")


def test_card_numbers_and_peaks_come_from_the_run():
    run = SimpleNamespace(env=H100, ranks={0: MACHINE})
    c = card(run)
    assert c.sms == 132 and c.cc == (9, 0) and c.has_bf16 and c.half == "bf16"
    assert c.mem_bw_gbs == pytest.approx(2 * 2619 * 5120 / 8 / 1e3)   # 3,352 GB/s
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "fp32") == 19.5     # not the A10's
    assert math.isnan(peak_tflops("NVIDIA L40S", "bf16"))            # not the L4's
    assert Card("Tesla V100-SXM2-16GB", cc=(7, 0)).half == "fp16"
    assert card(SimpleNamespace(env={"device": "cpu"}, ranks={})) is None


def _run(events, cfg, env=H100, summary=None, ranks=None):
    ev = pd.read_parquet(FIX / "h200" / events) if isinstance(events, str) else events
    sm = summary if summary is not None else pd.DataFrame(
        {"rank": sorted(ev["rank"].unique()), "device": "gpu"})
    return SimpleNamespace(events=ev, summary=sm, env=env, ranks=ranks or {0: MACHINE},
                           config=cfg, ok=True, compile_events=pd.DataFrame(),
                           steps=pd.DataFrame(), run_id="1", compiled_by=None, errors={},
                           status="ok", flags=())


def test_an_fp32_tensor_parallel_step_reads_as_fp32_matrix_work_and_gets_autocast_and_tf32():
    run = _run("tp_b256_events.parquet", StepConfig(scenario="tp-mlp-infer", batch=256))
    rs = readings(run)
    assert [r.rank for r in rs] == [0, 1]
    assert rs[1].dtype_share("fp32") > 0.9 and rs[0].share("comm") > 0.1
    assert "fp32 matrix products" in rs[0].text and "989" in rs[0].text
    moves = {s.rule: s for s in kernel_rules.precision(run)}
    assert moves["autocast"].change == {"autocast": "bf16"}
    assert moves["tf32"].change == {"matmul_precision": "high"}
    assert all(s.changes_numbers for s in moves.values())
    assert moves["autocast"].score > moves["tf32"].score > 0.5
    assert "93 %" in moves["autocast"].evidence      # rank 1, the larger share
    # and advise ranks it above everything else this run shows
    top = advise(run)[0]
    assert top.rule == "autocast", [s.rule for s in advise(run)]


def test_a_bf16_fsdp_step_gets_no_precision_move_and_names_its_optimizer_kernels():
    sm = pd.read_parquet(FIX / "h200" / "fsdp_host_summary.parquet")
    cfg = StepConfig(scenario="custom", parallel="fsdp2", compile="default", autocast="bf16")
    run = _run("fsdp_host_events.parquet", cfg, summary=sm)
    (r,) = readings(run)
    assert r.dtype_share("bf16") > 0.15 and r.dtype_share("fp32") < 0.01
    assert r.share("elementwise") > 0.5 and r.share("memory") > 0.1
    assert "multi_tensor_apply" in r.text and "SMs active 50 %" in r.text
    assert kernel_rules.precision(run) == []


def _events(rows):
    """An events table of GPU kernels: (name, dur_us) repeated over two profiled steps."""
    out = []
    for step in (5, 6):
        t = step * 10_000_000
        for name, us in rows:
            out.append(dict(rank=0, lane="cuda:0:7", category="compute", name=name, ts_ns=t,
                            dur_ns=int(us * 1e3), step=step, correlation=0, graph=False))
            t += int(us * 1e3) + 1000
    return pd.DataFrame(out)


GEMM = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 9, false, false>(float*, float const*, int, int, int, bool const*, int, bool)"
LOGSOFTMAX = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)"
SDPA = "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)"
CONV = "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel__5x_cudnn"
TO_NHWC = "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, float const*, float*)"
CFG = StepConfig(scenario="custom")


def test_softmax_between_products_without_an_attention_kernel_is_attention_by_hand():
    by_hand = _run(_events([(GEMM, 300), (SOFTMAX, 180), (GEMM, 200), (LOGSOFTMAX, 50)]), CFG)
    (s,) = kernel_rules.hand_attention(by_hand)
    assert s.rule == "sdpa" and s.change == {} and "scaled_dot_product_attention" in s.code
    assert "2 softmax kernels" not in s.evidence and "1 softmax kernels" in s.evidence
    # SDPA already, or only a loss's log-softmax: nothing to say
    assert kernel_rules.hand_attention(_run(_events([(GEMM, 300), (SDPA, 200)]), CFG)) == []
    assert kernel_rules.hand_attention(_run(_events([(GEMM, 300), (LOGSOFTMAX, 50)]), CFG)) == []


def test_nchw_convolutions_get_channels_last_and_an_nhwc_model_does_not():
    nchw = _run(_events([(CONV, 300), (TO_NHWC, 60), (GEMM, 20)]), CFG)
    (s,) = kernel_rules.channels_last(nchw)
    assert s.change == {"memory_format": "channels_last"} and "conversions" in s.evidence
    done = _run(_events([(CONV, 300), (TO_NHWC, 60)]), CFG.replace(memory_format="channels_last"))
    assert kernel_rules.channels_last(done) == []
    # convolutions in TF32 are matrix work a 16-bit autocast still speeds up
    assert [m.rule for m in kernel_rules.precision(nchw)] == ["autocast"]


def test_max_autotune_only_for_a_compiled_step_of_matrix_products():
    gemms = _events([(GEMM, 300), ("triton_poi_fused_add_0", 30)])
    assert kernel_rules.max_autotune(_run(gemms, CFG)) == []        # eager: compile first
    (s,) = kernel_rules.max_autotune(_run(gemms, CFG.replace(compile="default")))
    assert s.change == {"compile": "max-autotune-no-cudagraphs"}
    (s,) = kernel_rules.max_autotune(_run(gemms, CFG.replace(compile="reduce-overhead")))
    assert s.change == {"compile": "max-autotune"}


def test_a_cpu_run_has_no_gpu_reading():
    ev = _events([(GEMM, 300)]).assign(lane="cpu:1")
    assert readings(_run(ev, CFG, env={"device": "cpu"})) == []


def _checked(**chk):
    return SimpleNamespace(ranks={0: {"check": dict(what="loss", finite=True, **chk)}})


def test_numerics_reads_the_worst_rank_against_the_stated_tolerance():
    ok = numerics(_checked(full_max_rel=7e-4, full_max_abs=0.007, value=10.5625, full_value=10.5554))
    assert ok.measured and ok.ok and ok.tolerance == NUMERICS_TOLERANCE["loss"]
    assert "10.5625 against 10.5554" in ok.text and "0.07 %" in ok.text
    far = numerics(_checked(full_max_rel=0.3, value=1.3, full_value=1.0))
    assert not far.ok and "diverge" in far.text
    nan = numerics(_checked(full_max_rel=float("nan"), value=float("nan"), full_value=1.0))
    assert not nan.ok and "not finite" in nan.text
    two = SimpleNamespace(ranks={0: {"check": dict(what="loss", full_max_rel=1e-3)},
                                 1: {"check": dict(what="loss", full_max_rel=0.5)}})
    assert numerics(two).rel == 0.5
    # a run made without check=True (or a step of your own) measured nothing
    assert not numerics(SimpleNamespace(ranks={0: {"check": None}})).measured
