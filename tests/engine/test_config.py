"""StepConfig validation: every combination that cannot work is refused before dispatch,
with a message that names the fields and the fix."""
import pickle

import pytest

from nbtools.config.step_config import ConfigError, StepConfig

BAD = {  # name: (kwargs, words the message must contain)
    "mode with non-inductor backend": (dict(compile="reduce-overhead", backend="aot_eager"),
                                       ["compile='reduce-overhead'", "backend='aot_eager'", "compile='default'"]),
    "backend without compile": (dict(backend="eager"), ["compile='off'", "backend"]),
    "manual capture on reduce-overhead": (dict(cudagraph="manual", compile="reduce-overhead"),
                                          ["already", "captures"]),
    "manual capture on max-autotune": (dict(cudagraph="manual", compile="max-autotune"), ["already"]),
    "manual capture, varying lengths": (dict(scenario="varlen-train", parallel="none", cudagraph="manual"),
                                        ["seq_schedule='varying'", "fixed"]),
    "manual capture of DDP": (dict(scenario="ddp-train", cudagraph="manual"), ["parallel='ddp'", "static"]),
    "strategy the scenario lacks": (dict(scenario="ddp-train", parallel="tp"), ["parallel='tp'", "supports ddp, none"]),
    "tp on fsdp2 scenario": (dict(scenario="fsdp2-train", parallel="tp"), ["not supported"]),
    "unknown scenario": (dict(scenario="resnet9000"), ["unknown", "tp-mlp-infer"]),
    "unknown compile mode": (dict(compile="turbo"), ["compile='turbo'", "reduce-overhead"]),
    "ddp_wrap without ddp": (dict(compile="default", ddp_wrap="compile-outside"), ["parallel='ddp' only"]),
    "optimize_ddp without compile": (dict(scenario="ddp-train", optimize_ddp="off"), ["compile='off'"]),
    "autocast scope without autocast": (dict(scenario="ddp-train", autocast_scope="step"), ["autocast='off'"]),
    "backward scope on inference": (dict(scenario="tp-mlp-infer", autocast="bf16", autocast_scope="step"),
                                    ["inference"]),
    "schedule without sequence": (dict(scenario="ddp-train", seq_schedule="varying"), ["no sequence"]),
    "seq_len without sequence": (dict(scenario="tp-mlp-infer", seq_len=64), ["no sequence"]),
    "dynamic without compile": (dict(dynamic="static"), ["compile"]),
    "fullgraph without compile": (dict(fullgraph=True), ["compile"]),
    "zero measured steps": (dict(steps=0), ["steps=0"]),
    "negative warmup": (dict(warmup=-1), ["warmup"]),
    "bad batch": (dict(batch=0), ["batch"]),
    "python_reducer outside": (dict(scenario="ddp-train", compile="default", optimize_ddp="python_reducer",
                                    ddp_wrap="compile-outside"), ["python_reducer", "compile-inside"]),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_combinations_raise_with_fields_named(name):
    kwargs, words = BAD[name]
    with pytest.raises(ConfigError) as e:
        StepConfig(**kwargs)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


GOOD = [
    dict(),
    dict(compile="reduce-overhead"),
    dict(compile="default", backend="aot_eager"),
    dict(compile="max-autotune-no-cudagraphs", cudagraph="manual"),
    dict(cudagraph="manual"),
    dict(scenario="ddp-train", compile="default", ddp_wrap="compile-outside"),
    dict(scenario="ddp-train", compile="default", optimize_ddp="python_reducer"),
    dict(scenario="varlen-train", compile="default", dynamic="mark", seq_schedule="bucketed"),
    dict(scenario="fsdp2-train", autocast="bf16", autocast_scope="forward+loss"),
    dict(scenario="varlen-train", parallel="fsdp2", cache="continue"),
]


@pytest.mark.parametrize("kw", GOOD, ids=[str(k) for k in GOOD])
def test_good_configs_are_frozen_and_picklable(kw):
    cfg = StepConfig(**kw)
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    with pytest.raises(Exception):
        cfg.compile = "default"
    assert StepConfig.from_dict(cfg.to_dict()) == cfg


def test_scenario_defaults_resolve():
    assert StepConfig().resolved_parallel == "tp"
    assert StepConfig(scenario="ddp-train").resolved_parallel == "ddp"
    assert StepConfig(scenario="fsdp2-train").resolved_parallel == "fsdp2"
    assert StepConfig(scenario="varlen-train").resolved_schedule == "varying"
    assert StepConfig(scenario="fsdp2-train").resolved_schedule == "fixed"


def test_device_rules():
    StepConfig(cudagraph="manual").check_device("cuda")
    with pytest.raises(ConfigError, match="needs CUDA"):
        StepConfig(cudagraph="manual").check_device("cpu")
    with pytest.raises(ConfigError, match="needs CUDA"):
        StepConfig(compile="default", backend="cudagraphs").check_device("cpu")
    with pytest.raises(ConfigError, match="bf16"):
        StepConfig(autocast="fp16").check_device("cpu")
    assert StepConfig(compile="reduce-overhead").unused_on("cpu")
    assert not StepConfig(compile="reduce-overhead").unused_on("cuda")


def test_an_engine_checks_a_run_no_lab_checked_for_its_device(monkeypatch):
    """The lab checks a run once (Lab.check) and the engine trusts a run checked for its
    device; a direct engine.run (a test, a benchmark) is checked on the engine, because CPU
    ranks would otherwise run fp16 autocast or the cudagraphs backend without a word."""
    import torch
    from nbtools.engine import runner
    from nbtools.engine.state import S
    monkeypatch.setattr(S, "device", torch.device("cpu"))
    monkeypatch.setattr(S, "recorder", None)
    for cfg in (StepConfig(autocast="fp16"), StepConfig(compile="default", backend="cudagraphs")):
        monkeypatch.setattr(S, "pg_broken", False)      # a failed run marks it broken
        out = runner.run(cfg, "direct")
        assert out["status"] == "failed" and out["error_type"] == "ConfigError", out["error"]
        assert "steps" not in out                       # refused before anything ran
    # checked for another device than this engine's: checked again here
    monkeypatch.setattr(S, "pg_broken", False)
    out = runner.run(StepConfig(autocast="fp16"), "elsewhere", None, "cuda")
    assert out["error_type"] == "ConfigError"


def test_diff_and_label():
    a, b = StepConfig(), StepConfig(compile="default", autocast="bf16")
    assert a.diff(b) == {"compile": ("off", "default"), "autocast": ("off", "bf16")}
    assert "compile=default" in b.label() and "autocast=bf16" in b.label()
    with pytest.raises(ConfigError, match="unknown StepConfig field"):
        StepConfig.from_dict({"compile": "off", "colour": "red"})


def test_fsdp2_sharding_and_compile_placement_fields():
    ok = StepConfig(scenario="fsdp2-train", compile="default", fsdp_compile="whole",
                    reshard_after_forward=False)
    assert ok.label().count("=") >= 3
    with pytest.raises(ConfigError, match="apply to parallel='fsdp2' only"):
        StepConfig(scenario="ddp-train", reshard_after_forward=False)
    with pytest.raises(ConfigError, match="apply to parallel='fsdp2' only"):
        StepConfig(scenario="fsdp2-train", parallel="ddp", compile="default", fsdp_compile="whole")
    with pytest.raises(ConfigError, match="Turn compile on"):
        StepConfig(scenario="fsdp2-train", fsdp_compile="whole")
    with pytest.raises(ConfigError, match="fsdp_compile='blocks' is not one of"):
        StepConfig(scenario="fsdp2-train", compile="default", fsdp_compile="blocks")
    with pytest.raises(ConfigError, match="True or False"):
        StepConfig(scenario="fsdp2-train", reshard_after_forward="no")


def test_grid_is_the_one_cross_product_of_sweeps():
    """config.grid: the lab's sweep and the CLI's `run` both sweep through it (each had its
    own itertools.product): base.replace per combination, last field fastest, a rejected
    combination kept as its ConfigError for the caller to skip (notebook) or refuse (CLI)."""
    from nbtools.config.grid import grid
    from nbtools.cli.main import sweep
    base = StepConfig(scenario="ddp-train", seed=7)
    got = grid(base, {"compile": ["off", "default"], "ddp_wrap": ["compile-inside",
                                                                  "compile-outside"]})
    assert [c for c, _ in got] == [dict(compile=m, ddp_wrap=w) for m in ("off", "default")
                                   for w in ("compile-inside", "compile-outside")]
    bad = got[1][1]
    assert isinstance(bad, ConfigError) and "compile='off'" in str(bad)
    assert [cfg.seed for _, cfg in got if not isinstance(cfg, ConfigError)] == [7, 7, 7]
    labelled = grid(base, {"batch": [1, 2]}, check=lambda cfg: cfg.label())
    assert [x for _, x in labelled] == ["ddp-train batch=1 seed=7", "ddp-train batch=2 seed=7"]
    with pytest.raises(ConfigError, match="compile='off'"):
        sweep({"scenario": "ddp-train", "compile": "off,default", "ddp_wrap": "compile-outside"})
