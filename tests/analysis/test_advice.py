"""The advice rules (nbtools/analysis/advice/) on real tables without a lab: compile events
recorded from real torch.compile calls in this process (CompileRecorder, as an engine
records them) with the steps' measured times, and real GPU profiler traces
(tests/fixtures/hta) for the communication rule. Each rule fires where its problem is in
the tables and is silent where it is not. On a lab: tests/lab/test_advice_lab.py."""
from __future__ import annotations

import html
import time

import pandas as pd
import pytest
import torch

from nbtools import StepConfig, load_traces
from nbtools.schema import tables
from nbtools.analysis.advice import NOTHING, Suggestion, Suggestions, advise, valid_change
from nbtools.engine.compile_recorder import CompileRecorder
from nbtools.results.run import Run
from support.paths import FIXTURES, H200

HTA = FIXTURES / "hta"
CUSTOM = StepConfig(scenario="custom", compile="default", backend="eager")


@pytest.fixture
def rec():
    torch._dynamo.reset()
    r = CompileRecorder()
    r.install()
    yield r
    r.uninstall()
    torch._dynamo.reset()


def recorded_run(rec, calls, cfg, limit=8) -> Run:
    """Run each call as one step (timed, as the engine times a CPU step) under the
    recorder: a Run holding real compile events and step times."""
    rows = []
    rec.start_run()
    with torch._dynamo.config.patch(recompile_limit=limit):
        for i, call in enumerate(calls):
            rec.set_step(i)
            t0, p0 = time.time_ns(), time.perf_counter_ns()
            call()
            rows.append(dict(rank=0, step=i, phase="warmup", ts_ns=t0,
                             dur_ns=time.perf_counter_ns() - p0))
    rec.set_step(-1)
    out = rec.finish_run(rank=0)
    ce = tables.from_wire(tables.COMPILE_COLUMNS, out["columns"])
    outcome = dict(state="compiled", graphs=out["counts"]["graphs"],
                   graph_breaks=out["counts"]["graph_breaks"])
    return Run(config=cfg, steps=pd.DataFrame(rows), compile_events=ce,
               ranks={0: {"compile_outcome": outcome}})


class Block(torch.nn.Module):
    def __init__(self, i, read):
        super().__init__()
        self.layer_idx, self.read = i, read
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.lin(x)
        if self.read and self.layer_idx == 0:
            y = y * 2
        return y


def blocks(read):
    bs = [torch.compile(Block(i, read), backend="eager") for i in range(10)]

    def call():
        x = torch.randn(2, 8)
        with torch.no_grad():
            for b in bs:
                x = b(x)
    return [call, call]


def test_module_int_guard_and_limit_from_real_per_block_compiles(rec):
    advice = advise(recorded_run(rec, blocks(read=True), CUSTOM))
    # the recompile limit was hit by the recompiles this fix removes: one suggestion, not
    # the cause and its symptom side by side (issue 43.6)
    assert [s.rule for s in advice] == ["module-int-guard"]
    s = advice[0]
    assert s.change == {} and s.rank == 1 and "self.layer_idx" in s.evidence
    assert "seen: 0, 1, 2, 3, 4, 5, 6, 7" in s.evidence and "recompile limit" in s.evidence
    assert s.score >= 0.5                   # the limit's weight goes with it


def test_a_saved_run_gives_the_same_advice_after_loading(rec, tmp_path):
    run = recorded_run(rec, blocks(read=True), CUSTOM)
    run.save(tmp_path / "run")
    again = Run.load(tmp_path / "run").advise()
    assert [(s.rule, s.evidence) for s in again] == [(s.rule, s.evidence) for s in advise(run)]


def test_blocks_that_do_not_read_their_index_get_no_advice(rec):
    advice = advise(recorded_run(rec, blocks(read=False), CUSTOM))
    assert advice == [] and str(advice) == NOTHING and html.escape(NOTHING) in advice._repr_html_()


def lengths(dynamic):
    f = torch.compile(lambda x: (x * 2).cos(), backend="eager", dynamic=dynamic)
    return [lambda n=n: f(torch.randn(3, n)) for n in (8, 12, 16, 20)]


def test_static_shapes_recompiling_per_length_suggest_a_dynamic_dimension(rec):
    cfg = CUSTOM.replace(dynamic="static")
    run = recorded_run(rec, lengths(False), cfg)
    advice = advise(run)
    assert [s.rule for s in advice] == ["recompile-shapes"]
    s = advice[0]
    # a step function cannot name its dimension for mark: dynamic for a custom run
    assert s.change == {"dynamic": "dynamic"} and valid_change(cfg, s.change) is None
    assert "3 recompile(s)" in s.evidence and "at index 1 (seen: 8, 12, 16, 20)" in s.evidence
    lost = run.compile_events.query("kind == 'recompile'")["dur_ns"].sum() / 1e9
    assert f"{lost:.2f} s of recompiles" in s.evidence
    assert s.score == pytest.approx(lost / (run.steps["dur_ns"].sum() / 1e9))
    assert "mark_dynamic(x, 1)" in s.code


def test_automatic_dynamic_recompiling_once_gets_no_advice(rec):
    run = recorded_run(rec, lengths(None), CUSTOM)
    assert (run.compile_events["kind"] == "recompile").sum() <= 1
    assert advise(run) == []


def autocast_calls(some_only):
    f = torch.compile(lambda x: (x @ x).relu().sum(), backend="eager")
    x = torch.randn(8, 8)

    def call(on):
        if on:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return f(x)
        return f(x)
    return [lambda i=i: call(not some_only or i % 2) for i in range(4)]


def test_autocast_on_some_calls_only_recompiles_on_global_state(rec):
    advice = advise(recorded_run(rec, autocast_calls(some_only=True), CUSTOM))
    assert [s.rule for s in advice] == ["global-state"]
    assert "because autocast(cpu)_enabled changed" in advice[0].evidence
    assert "1 recompile(s)" in advice[0].evidence and advice[0].change == {}


def test_autocast_on_every_call_gets_no_advice(rec):
    assert advise(recorded_run(rec, autocast_calls(some_only=False), CUSTOM)) == []


def test_a_change_that_does_not_apply_to_the_config_is_dropped_with_the_reason():
    assert valid_change(StepConfig(scenario="ddp-train"), {"reshard_after_forward": False})
    assert valid_change(StepConfig(scenario="varlen-train", compile="default"),
                        {"dynamic": "mark"}) is None


# -- communication: real GPU traces, with an FSDP2 config attached --------------------------
@pytest.mark.parametrize("name, fires", [
    ("trace_diff_control_control.json.gz", True),        # 14.7 of 77.5 ms exposed (19 %)
    ("nccl_parser_config_nccl_data.json.gz", False),     # 13.2 of 222 ms (6 %)
    ("ns_resolution_trace_rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", False),  # no comm
])
def test_fsdp_reshard_reads_the_exposed_share_of_a_real_trace(name, fires):
    run = load_traces(HTA / name)
    sm = run.summary.iloc[0]
    share = sm["exposed_comm_ms"] / sm["profiled_window_ms"]
    run.config = StepConfig(scenario="fsdp2-train")      # the traces say no strategy
    got = [s for s in advise(run) if s.rule == "fsdp-reshard"]
    assert bool(got) == fires == (share >= 0.10)
    if fires:
        assert got[0].change == {"reshard_after_forward": False}
        ms = f"{sm['exposed_comm_ms']:.2f} ms of a {sm['profiled_window_ms']:.2f} ms"
        assert ms in got[0].evidence
        assert got[0].score == pytest.approx(share)
    run.config = StepConfig(scenario="fsdp2-train", reshard_after_forward=False)
    assert not [s for s in advise(run) if s.rule == "fsdp-reshard"]   # already off


def test_a_suggestion_reads_as_text_and_html():
    s = Suggestion(rule="r", title="Do <this>", change={"dynamic": "mark"}, evidence="3 <x>",
                   why="because", code="a = 1\nb = 2", cost="one A/B", rank=1)
    assert "1. Do <this>" in str(s) and "dynamic='mark'" in str(s) and "     b = 2" in str(s)
    assert "Do &lt;this&gt;" in s._repr_html_() and "3 &lt;x&gt;" in s._repr_html_()
    assert isinstance(Suggestions([s]), list)


# -- launch-bound: real 2 x H200 traces (nbtools/data/h200: tp-mlp-infer at batch 1) ------


def h200_run(mode, tmp_path):
    tmp_path.mkdir(exist_ok=True)
    for r in (0, 1):
        (tmp_path / f"tp_{mode}_rank{r}.json.gz").write_bytes(
            (H200 / f"tp_{mode}_rank{r}.json.gz").read_bytes())
    run = load_traces(tmp_path)
    run.config = StepConfig(scenario="tp-mlp-infer", compile=mode)   # what ran on the H200s
    return run


def test_eager_tp_at_batch_1_on_h200_is_launch_bound(tmp_path):
    run = h200_run("off", tmp_path)
    got = [s for s in advise(run) if s.rule == "launch-bound"]
    assert len(got) == 1, advise(run)
    s, r0 = got[0], run.summary.set_index("rank").loc[0]
    assert s.change == {"compile": "reduce-overhead"}
    idle = f"the GPU idled {r0['idle_ms']:.3g} ms of a {r0['profiled_window_ms']:.3g} ms"
    assert idle in s.evidence and "host wait" in s.evidence
    assert "kernel launch calls" in s.evidence        # where the host was, in words
    assert s.ranks == (0,)        # rank 1 waits in its collectives instead (exposed comm)
    assert s.score == pytest.approx(r0["host_wait_ms"] / r0["profiled_window_ms"])


def test_the_same_step_replayed_from_cuda_graphs_is_not(tmp_path):
    run = h200_run("reduce-overhead", tmp_path)
    assert run.summary["graph_coverage_pct"].min() > 99
    # nothing about launches; what is left is what the kernels compute: fp32 products
    # (batch-1 gemv) that bf16 or TF32 would halve or better, in a compiled step
    rules = [s.rule for s in advise(run)]
    assert rules == ["autocast", "tf32", "max-autotune"], rules


def test_a_cpu_trace_gets_no_gpu_advice():
    run = load_traces(HTA / "cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    run.config = StepConfig(scenario="tp-mlp-infer")
    assert not [s for s in advise(run) if s.rule == "launch-bound"]


def test_eager_tp_on_h200_names_rank_0_as_the_host_side_straggler(tmp_path):
    run = h200_run("off", tmp_path)
    got = [s for s in advise(run) if s.rule == "straggler"]
    assert len(got) == 1 and got[0].ranks == (0,) and got[0].change == {}
    assert got[0].evidence.startswith("rank 0 launched the all-reduces late")
    assert "host-side" in got[0].title and "CPU lane" in got[0].code
    assert not [s for s in advise(h200_run("reduce-overhead", tmp_path / "ro"))
                if s.rule == "straggler"]


# -- CUDA-graph skips: table-only (CPU inductor records none) -----------------------------
def test_a_cudagraph_skip_row_names_its_reason_and_fix(rec):
    """A real CPU run's compile events with one cudagraph_skip row added, its reason the
    text torch's own formatter writes (what the recorder logs on a GPU); the same run
    without the row gets nothing."""
    from torch._inductor.cudagraph_utils import format_default_skip_message
    run = recorded_run(rec, lengths(None)[:1], CUSTOM)
    assert advise(run) == []
    row = dict(run.compile_events.iloc[0])
    row.update(kind="cudagraph_skip", frame="train.py:12",
               reason=format_default_skip_message("mutated inputs (2 instances)"))
    run.compile_events = pd.concat([run.compile_events, pd.DataFrame([row])])
    got = advise(run)
    assert [s.rule for s in got] == ["cudagraph-skip"]
    assert "skipping cudagraphs due to mutated inputs (2 instances) at train.py:12" in \
        got[0].evidence
    assert "in-place op" in got[0].code and got[0].score == pytest.approx(0.2)


# -- the issue's case: a Hugging Face Llama compiled per decoder layer, use_cache on --------
def hf_llama_forward(use_cache):
    from transformers import LlamaConfig, LlamaForCausalLM   # the models extra (in test)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=10,
        num_attention_heads=2, num_key_value_heads=2, use_cache=use_cache)).eval()
    for layer in model.model.layers:
        layer.compile(backend="eager")          # per-block compile, as FSDP2 does it

    def call():
        with torch.no_grad():
            model(torch.randint(0, 64, (1, 8)), use_cache=use_cache)
    return [call]


def test_hf_llama_per_layer_compile_with_use_cache_says_use_cache_false(rec):
    advice = advise(recorded_run(rec, hf_llama_forward(True), CUSTOM))
    assert [s.rule for s in advice][:1] == ["module-int-guard"], advice
    assert "recompile-limit" not in [s.rule for s in advice]      # folded into it
    s = advice[0]
    assert "use_cache = False" in s.code and "layer_idx" in s.evidence
    assert "seen: 0, 1, 2, 3, 4, 5, 6, 7" in s.evidence and "recompile limit" in s.evidence
    # transformers' frame and its KV cache in the guards: the lab can try the fix itself
    assert s.model_patch == {"config.use_cache": False}


def test_hf_llama_per_layer_compile_without_the_cache_gets_none(rec):
    assert advise(recorded_run(rec, hf_llama_forward(False), CUSTOM)) == []


def test_the_guard_text_the_issue_quotes_is_read_as_a_module_int():
    """transformers 4.x on the H200 host (issue 33): the guard named the attention's
    layer_idx directly."""
    from nbtools.analysis.advice.compile_rules import _MODULE_INT
    m = _MODULE_INT.search("0/0: self._modules['self_attn'].layer_idx == 0  # ...")
    assert m.groups() == ("self._modules['self_attn'].layer_idx", "layer_idx", "0")


def test_a_run_with_no_tables_gets_no_advice():
    assert advise(Run(config=None)) == [] and advise(Run(config=StepConfig())) == []


@pytest.mark.parametrize("gone", [("steps", "events"), ("compile_events",),
                                  ("steps", "events", "compile_events", "summary")])
def test_a_saved_run_whose_tables_were_deleted_gets_no_advice_and_says_why(tmp_path, gone):
    """issue 54: advise on a saved run whose steps and events files were deleted said
    "nothing ... shows a known problem" (its summary alone was left to the rules)."""
    from nbtools.results.history import History
    run = load_traces(sorted(H200.glob("tp_off_rank*.json.gz")))
    History(tmp_path / "h").add(run)
    for name in gone:
        (run.folder / f"{name}.parquet").unlink()
    (back,) = History.load(tmp_path / "h").runs
    said = advise(back)
    assert said.unreadable and not len(said)
    for text in (str(said), html.unescape(said._repr_html_()), str(back.advise())):
        assert NOTHING not in text and "known problem" not in text, text
        assert "No advice: run #" in text and (
            "has no tables" in text if len(gone) == 4 else
            f"lost its {', '.join(gone)} table(s)" in text), text
