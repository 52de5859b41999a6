"""Compile events through the lab on 2 CPU ranks (real engines, gloo): reasons and counts
as PyTorch reports them, on every rank, on the run's clock."""
import os
from pathlib import Path

import pytest

from nbtools import ConfigError, Lab, StepConfig, export_html

from support.lab_steps import break_line, step_with_break

FAST = dict(warmup=1, steps=2, profiled=0)


# the conftest lab, with what this module needs beside its defaults
LAB = dict(timeout=300, pg_timeout=300, echo=False)


def _per_rank(run, kind):
    ce = run.compile_events
    return ce[ce["kind"] == kind].groupby("rank").size().reindex([0, 1], fill_value=0)


def test_flipping_autocast_on_a_compiled_scenario_recompiles(lab):
    base = StepConfig(scenario="fsdp2-train", parallel="ddp", compile="default",
                      backend="aot_eager", cache="continue", **FAST)
    first = lab.run(base)
    assert (_per_rank(first, "compile") >= 1).all()
    # the backward, compiled at the first backward, is part of the compile seconds
    assert (_per_rank(first, "backward_compile") >= 1).all()
    ce = first.compile_events
    spent = ce[ce["kind"] != "graph_break"].groupby("rank")["dur_ns"].sum() / 1e9
    assert first.summary["compile_s"].tolist() == pytest.approx(spent.tolist())
    flipped = lab.run(base.replace(autocast="bf16"))
    rec = flipped.compile_events[flipped.compile_events["kind"] == "recompile"]
    assert set(rec["rank"]) == {0, 1}
    # the reason is PyTorch's own guard text
    assert rec["reason"].str.contains("GLOBAL_STATE changed").all(), rec["reason"].tolist()
    assert rec["reason"].str.contains("autocast").all(), rec["reason"].tolist()
    assert (flipped.summary["recompiles"] >= 1).all()
    # on the run's clock: inside a warm-up step of this run
    steps = flipped.steps
    t0, t1 = steps["ts_ns"].min(), (steps["ts_ns"] + steps["dur_ns"]).max()
    assert rec["ts_ns"].between(t0, t1).all()
    assert (rec["step"] >= 0).all()


def test_a_new_batch_under_continue_meets_the_same_model(lab):
    """cache=continue with a new batch keeps the model and its compiled code: going back to
    a batch seen before hits the cached graph (a rebuilt model would recompile)."""
    base = StepConfig(scenario="tp-mlp-infer", compile="default", backend="aot_eager",
                      dynamic="static", **FAST)
    runs = [lab.run(base.replace(batch=b, cache="fresh" if i == 0 else "continue"))
            for i, b in enumerate((1, 3, 1))]
    kinds = [set(r.compile_events.query("rank == 0")["kind"]) for r in runs]
    assert "compile" in kinds[0] and "recompile" in kinds[1], kinds
    assert not kinds[2] & {"compile", "recompile"}, kinds
    built = [r.ranks[0]["model_built_at"] for r in runs]
    assert built[0] >= 0 and built == [built[0]] * 3, built


def test_varlen_static_recompiles_per_length_until_the_limit(lab):
    run = lab.run(StepConfig(scenario="varlen-train", compile="default", backend="eager",
                             dynamic="static", warmup=14, steps=2, profiled=0))
    s = run.summary.set_index("rank")
    # one compile per new length; PyTorch's recompile_limit is 8
    assert (s["recompiles"] == 7).all(), s["recompiles"]
    limit = run.compile_events[run.compile_events["kind"] == "limit_hit"]
    assert set(limit["rank"]) == {0, 1}
    rec = run.compile_events[run.compile_events["kind"] == "recompile"]
    assert rec["reason"].str.contains("tensor 'tokens' size mismatch at index 1").all()
    assert not any(f.startswith("divergent") for f in run.flags), run.flags


@pytest.mark.parametrize("dynamic", ["auto", "dynamic"])
def test_varlen_dynamic_compiles_at_most_twice(lab, dynamic):
    run = lab.run(StepConfig(scenario="varlen-train", compile="default", backend="eager",
                             dynamic=dynamic, warmup=10, steps=2, profiled=0))
    s = run.summary.set_index("rank")
    assert (s["compiles"] <= 2).all(), s[["compiles", "recompiles"]]   # recompiles included
    assert not len(run.compile_events[run.compile_events["kind"] == "limit_hit"])


def test_graph_break_reported_with_its_source_line(lab):
    run = lab.run(step_with_break, StepConfig(compile="default", backend="eager", **FAST))
    br = run.compile_events[run.compile_events["kind"] == "graph_break"]
    assert set(br["rank"]) == {0, 1}
    line = break_line()
    assert br["frame"].str.endswith(f":{line}").all(), (line, br["frame"].tolist())
    assert br["reason"].str.contains("print").all()


def _rank_dependent_step(ctx):
    import torch
    n = 8 if ctx.rank == 0 else 8 + ctx.step   # rank 1 sees a new shape every step
    return ctx.compile(lambda x: (x * 2).sum())(torch.ones(n))


def test_a_rank_on_another_code_path_is_flagged_divergent(lab):
    run = lab.run(_rank_dependent_step, StepConfig(compile="default", backend="eager",
                                                   dynamic="static", warmup=3, steps=2,
                                                   profiled=0))
    flag = [f for f in run.flags if f.startswith("divergent")]
    assert flag, run.flags
    assert "rank 1" in flag[0] and "rank 0" in flag[0]


def test_export_carries_no_connection_key_of_this_lab(lab, tmp_path):
    key = lab.client.session.key.decode()
    assert len(key) > 8
    out = export_html(tmp_path / "r.html", lab.history, notes="compile events")
    text = out.read_text()
    assert key not in text
    assert all(r.run_id in text for r in lab.history)


def test_a_sweep_checks_each_config_once_on_the_client(lab, monkeypatch):
    """Lab.check is the one client-side check: sweep checks every config first and runs
    each as lab.run(checked), which checks nothing again (the engines trust it too)."""
    from nbtools import tutorial as X
    seen = []
    check = StepConfig.check_device
    monkeypatch.setattr(StepConfig, "check_device",
                        lambda self, device: (seen.append(self.batch), check(self, device))[1])
    runs = X.sweep(lab, StepConfig(scenario="tp-mlp-infer", size="small", **FAST),
                   batch=[1, 2], autocast=["off", "fp16"])
    assert [r.ok for r in runs] == [True, True] and seen == [1, 1, 2, 2]
    with pytest.raises(ConfigError, match="bf16"):       # fp16 on CPU ranks: refused here
        lab.check(StepConfig(autocast="fp16"))


def test_a_bucketed_run_brings_back_its_real_and_padded_tokens(lab):
    """Each rank reports its items per measured step; tokens_per_s reads them off the Run."""
    from nbtools.analysis.counts import tokens_per_s
    run = lab.run(StepConfig(scenario="varlen-train", seq_schedule="bucketed", warmup=1,
                             steps=4, profiled=0))
    items = run.ranks[0]["step_items"]
    assert items["step"] == [1, 2, 3, 4] and all(r <= p for r, p in zip(items["real"],
                                                                      items["padded"]))
    t = tokens_per_s(run)
    assert t["rank"].tolist() == [0, 1] and (t["tokens_per_s"] > 0).all()
    assert (t["padding_pct"] >= 0).all() and (t["padding_pct"] < 100).all()


def test_varlen_throughput_counts_real_tokens():
    import torch
    from nbtools.engine import scenarios
    cfg = StepConfig(scenario="varlen-train", seq_schedule="bucketed")
    wl = scenarios.build(cfg, torch.device("cpu"), 0, 1)
    real = [wl.items_at(i) for i in range(12)]
    padded = [wl.make_batch(i)[0][0].numel() for i in range(12)]
    assert len(set(real)) > 1 and all(r <= p for r, p in zip(real, padded))
    assert any(r < p for r, p in zip(real, padded))          # padding is not throughput
    assert max(real) <= wl.items_per_step                   # batch x maximum length


def test_fsdp2_whole_model_compile_and_kept_parameters(lab):
    """The claim-11 matrix's other cells run: shard first then compile the whole model, and
    keep the gathered parameters for backward (reshard_after_forward=False)."""
    base = StepConfig(scenario="fsdp2-train", compile="default", backend="aot_eager", **FAST)
    whole = lab.run(base.replace(fsdp_compile="whole", reshard_after_forward=False))
    notes = whole.ranks[0]["notes"]
    assert any("whole model compiled" in n for n in notes), notes
    assert any("reshard_after_forward=False" in n for n in notes), notes
    # FSDP2's hooks are Dynamo-disabled: the model's own frame breaks at them and runs
    # eagerly, and the frames it calls (the blocks) compile on their own
    ce = whole.compile_events
    broke = ce[ce["kind"] == "graph_break"]
    assert set(broke["rank"]) == {0, 1} and broke["frame"].str.contains("fsdp").all(), broke
    assert (_per_rank(whole, "compile") >= 1).all() and (whole.summary["graphs"] >= 1).all()
    blocks = lab.run(base)
    assert (blocks.summary["graph_breaks"] == 0).all()
    assert any("then fully_shard per block" in n for n in blocks.ranks[0]["notes"])
    assert blocks.ranks[0]["model_built_at"] != whole.ranks[0]["model_built_at"]



# Run in the engines' namespace (code, not functions: the engines cannot import this file)
_WATCH = """
import weakref
from nbtools.engine.state import S as _S
_watched = [weakref.ref(_S.workload.model)] + [weakref.ref(p) for p in _S.workload.model.parameters()]
"""
_ALIVE = "_alive = sum(r() is not None for r in _watched)"


def test_a_rebuilt_model_frees_the_previous_one_before_the_run(lab):
    """Compiled FSDP2 modules live in reference cycles: unless the engine collects them
    before building the next model, the old weights and optimizer state stay allocated
    and inflate the next run's peak memory (seen on H200 in notebook 04's matrix)."""
    base = StepConfig(scenario="fsdp2-train", compile="default", backend="aot_eager", **FAST)
    lab.run(base)
    # the ranks' engines only: the client also lists the lab's warm spares
    engines = lab.client[sorted(lab.rank_to_engine.values())]
    engines.execute(_WATCH, block=True)
    engines.execute(_ALIVE, block=True)
    assert min(engines.pull("_alive", block=True)) > 1
    lab.run(base.replace(reshard_after_forward=False))
    engines.execute(_ALIVE, block=True)
    assert engines.pull("_alive", block=True) == [0, 0]


@pytest.mark.slow
def test_a_compile_cache_folder_outlives_the_lab(tmp_path):
    """Lab(compile_cache=DIR): a second lab's first compile of the same model hits the FX-graph
    cache the first lab wrote (one folder for the host's ranks: both ranks' inductor reads
    and writes it); without it every lab starts cold."""
    cfg = StepConfig(scenario="tp-mlp-infer", size="small", compile="default", backend="inductor",
                     **FAST)
    caches = []
    for _ in range(2):
        with Lab(n=2, history=None, timeout=300, echo=False, compile_cache=tmp_path / "cc") as lab:
            assert "compile cache" in repr(lab) and "per rank" not in repr(lab)
            ce = lab.run(cfg).compile_events
            caches.append(ce[ce["kind"] == "compile"].groupby("rank")["cache"].apply(set))
            # each rank's engine (not the spares) reads its own environment
            dirs = [lab.client[e].apply_sync(os.getenv, "TORCHINDUCTOR_CACHE_DIR")
                    for e in lab.rank_to_engine.values()]
        assert not lab.workdir.exists()    # the lab's own scratch folder goes with it
    folders = sorted(p.name for p in (tmp_path / "cc").iterdir())
    assert len(folders) == 1 and folders[0].startswith("host-"), folders
    assert set(dirs) == {str(tmp_path / "cc" / folders[0])}, dirs
    assert all("miss" in c for c in caches[0]), caches[0]
    assert all(c == {"hit"} for c in caches[1]), caches[1]


def test_labs_without_a_folder_of_their_own_share_nbtools_compile_cache(lab):
    """$NBTOOLS_COMPILE_CACHE (tests/conftest.py sets one per test run) is the default of
    Lab(compile_cache=): the module's lab named none, and its ranks compile into that folder."""
    expected = Path(os.environ["NBTOOLS_COMPILE_CACHE"]).resolve()
    assert lab.compile_cache == expected and f"compile cache {expected}" in repr(lab)
    dirs = {lab.client[e].apply_sync(os.getenv, "TORCHINDUCTOR_CACHE_DIR")
            for e in lab.rank_to_engine.values()}
    assert len(dirs) == 1 and Path(dirs.pop()).parent == expected, dirs


def test_nbtools_compile_cache_is_checked_like_the_argument(tmp_path, monkeypatch):
    from nbtools.lab.arguments import cache_folder
    monkeypatch.setenv("NBTOOLS_COMPILE_CACHE", str(tmp_path / "cc"))
    assert cache_folder(None) == (tmp_path / "cc").resolve() and (tmp_path / "cc").is_dir()
    assert cache_folder(tmp_path / "own") == (tmp_path / "own").resolve()   # the argument wins
    (tmp_path / "f").write_text("")
    monkeypatch.setenv("NBTOOLS_COMPILE_CACHE", str(tmp_path / "f"))
    with pytest.raises(ConfigError, match=r"\$NBTOOLS_COMPILE_CACHE=.*is a file"):
        cache_folder(None)
    monkeypatch.setenv("NBTOOLS_COMPILE_CACHE", "")       # empty: unset
    assert cache_folder(None) is None


def test_a_compile_cache_per_that_is_neither_host_nor_rank_is_refused():
    with pytest.raises(ConfigError, match="compile_cache_per='gpu'.*host, rank"):
        Lab(n=2, history=None, compile_cache_per="gpu")


def test_a_compile_cache_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match="is a file"):
        Lab(n=2, history=None, compile_cache=tmp_path / "f")


@pytest.mark.slow
def test_run_cli_keeps_the_compile_cache_and_repeats_in_rounds(tmp_path, capsys):
    from nbtools.cli.main import main
    argv = ["run", "--scenario", "tp-mlp-infer", "--size", "small", "--compile", "default",
            "--backend", "aot_eager", "--warmup", "1", "--steps", "2", "--profiled", "0",
            "--batch", "1,2", "--repeats", "2", "--history", str(tmp_path / "h"),
            "--compile-cache", str(tmp_path / "cc"), "--compile-cache-per", "rank", "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    started = [line.split("batch=")[1].split()[0] for line in out.splitlines()
               if line.startswith("-> ")]
    assert started == ["1", "2", "2", "1"] * 2, started    # rounds of A B B A
    spread = out.split("over identical runs:")[1].strip().split("\n\n")[0].splitlines()
    assert spread[0].split()[:2] == ["batch", "median"] and len(spread) == 3, spread
    assert all(line.split()[-2] == "4" for line in spread[1:]), spread     # n runs each
    # two configs: an A/B, and its verdict as lab.ab gives it (2 rounds: says what it assumes)
    verdict = out.split("A/B verdict (step_ms, B over A, 95 % interval over rounds): ")[1]
    line = verdict.splitlines()[0]
    assert "2 rounds; normal noise assumed below 6 rounds)" in line, verdict
    assert sorted(p.name for p in (tmp_path / "cc").iterdir()) == ["rank0", "rank1"]
    assert main(argv[:-7] + ["--repeats", "0"]) == 2
