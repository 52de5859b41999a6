"""Library warnings from the ranks, folded for a person: one line per kind with a count, the
full text on demand (issue 34: DDP's three-line "Grad strides" warning, torch.jit's
DeprecationWarning, Kineto's note and the profiler's "record function" lines buried a run)."""
from __future__ import annotations

from nbtools.lab.engine_output import KINETO_NOTE, from_report, kind, warnings_html, warnings_text


def _ddp(shape):
    return dict(category="UserWarning", where="/venv/torch/autograd/graph.py:829", message=(
        "Grad strides do not match bucket view strides. This may indicate grad was not created "
        "according to the gradient layout contract, or that the param's strides changed since "
        f"DDP was constructed.  This is not an error, but may impair performance.\ngrad.sizes() = "
        f"[{shape}, 256], strides() = [1, {shape}]\nbucket_view.sizes() = [{shape}, 256], "
        f"strides() = [256, 1]"))


PROFILER = ("[W1202 10:00:01.123 profiler_python.cpp:{n}] Warning: Profiler record function "
            "'nbtools/step {n}' will be ignored (function profiling_not_enabled)")
JIT = dict(category="DeprecationWarning", where="/venv/torch/jit/_script.py:1480",
           message="`torch.jit.script` is deprecated. Please switch to `torch.compile`.")


def by_rank():
    texts = from_report([_ddp(64), _ddp(128), _ddp(64), JIT]) + \
        [PROFILER.format(n=i) for i in range(5)] + [KINETO_NOTE]
    return {0: texts, 1: texts}


def test_each_kind_is_one_line_with_its_count(monkeypatch):
    monkeypatch.delenv("NBTOOLS_WARNINGS", raising=False)
    text = warnings_text(by_rank())
    lines = text.splitlines()
    assert len(lines) == 4 + 1, text                  # DDP, jit, profiler, Kineto; the hint
    ddp = next(line for line in lines if "Grad strides" in line)
    assert ddp.startswith("[rank 0, 1] 6 x UserWarning: Grad strides") and ddp.endswith("…")
    assert next(line for line in lines if "record function" in line).startswith("[rank 0, 1] 10 x ")
    assert "grad.sizes()" not in text                # the full text waits to be asked for
    assert "lab.engine_log" in lines[-1]


def test_the_full_text_on_demand(monkeypatch):
    monkeypatch.setenv("NBTOOLS_WARNINGS", "full")
    text = warnings_text(by_rank())
    assert "grad.sizes() = [64, 256]" in text and "grad.sizes() = [128, 256]" in text
    html = warnings_html(by_rank())
    assert html.count("<pre") == 2 + 1 + 5 + 1      # every distinct text under its kind
    assert "6 x UserWarning: Grad strides" in html and "4 library warning(s)" in html


def test_kinds_fold_numbers_and_names_not_words():
    assert kind(PROFILER.format(n=1)) == kind(PROFILER.format(n=99))
    assert kind(from_report([_ddp(64)])[0]) == kind(from_report([_ddp(8)])[0])
    assert kind(from_report([JIT])[0]) != kind(from_report([_ddp(8)])[0])


# What 2 gloo ranks print under TORCH_CPP_LOG_LEVEL=INFO once their group is up (notebook 05
# asks for it): c10's lines carry the rank, and DDP's setup is a list under one line.
DDP_INFO = ["[rank0]:[I1204 20:25:52.871576553 reducer.cpp:132] Reducer initialized with "
            "bucket_bytes_cap: 26214400 first_bucket_bytes_cap: 1048576",
            "[rank0]:[I1204 20:25:52.871917862 logger.cpp:223] [Rank 0]: DDP Initialized with: ",
            "broadcast_buffers: 1", "bucket_cap_bytes: 26214400", "cuda_visible_devices: "]
DDP_INFO_END = ["gloo_socket_ifname: lo", "", "a print of the step",
                "[rank0]:[W1204 20:25:53.1 profiler_python.cpp:7] Warning: Profiler record "
                "function 'nbtools/step 3' will be ignored (function profiling_not_enabled)",
                "[rank0]:[E1204 20:25:53.2 ProcessGroupGloo.cpp:9] an error stays in view"]


def test_rank_prefixed_log_lines_and_their_lists_fold_across_reads():
    """issue 44: "[rank0]:[W1204 ..." lines passed through raw (the rank prefix hid their
    level), and so did c10d's INFO lines; a list under a log line arrives in pieces."""
    from nbtools.lab.engine_output import Splitter
    sp = Splitter()
    show, done = sp.feed(DDP_INFO)
    assert show == [] and len(done) == 1        # the list is still open
    show, done = sp.feed(DDP_INFO_END)
    assert show == ["a print of the step",
                    "[rank0]:[E1204 20:25:53.2 ProcessGroupGloo.cpp:9] an error stays in view"]
    assert sp.close() == [] and len(sp.records) == 3
    ddp = sp.records[1]
    assert ddp.splitlines()[1:] == ["broadcast_buffers: 1", "bucket_cap_bytes: 26214400",
                                    "cuda_visible_devices: ", "gloo_socket_ifname: lo"]
    # rank 1's lines are the same kinds
    assert kind(sp.records[2]) == kind(sp.records[2].replace("[rank0]", "[rank1]")
                                       .replace("step 3", "step 4"))
    text = warnings_text({0: sp.records, 1: sp.records})
    assert "[rank 0, 1] 2 x [I logger.cpp:223] [Rank 0]: DDP Initialized with: …" in text
    assert "20:25" not in text and "broadcast_buffers" not in text


def test_each_kind_is_said_once_per_lab():
    from nbtools.lab.engine_output import EngineLog, to_say
    log = EngineLog()
    first = to_say(log, {0: [PROFILER.format(n=1)], 1: [PROFILER.format(n=2)]}, "run1")
    assert first == {0: [PROFILER.format(n=1)], 1: [PROFILER.format(n=2)]}
    again = to_say(log, {0: [PROFILER.format(n=3), KINETO_NOTE], 1: [PROFILER.format(n=4)]},
                   "run2")
    assert again == {0: [KINETO_NOTE]}           # only what this lab had not met
    assert to_say(log, {0: [KINETO_NOTE]}, "run3") == {}
    (profiler, kineto) = log.kinds.values()
    assert profiler["n"] == 4 and profiler["runs"] == ["run1", "run2"]
    assert kineto["n"] == 2 and kineto["ranks"] == [0]
    assert "4 x in 2 run(s)" in str(log) and "'nbtools/step 4'" in str(log)
