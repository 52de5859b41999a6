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
    assert "lab.engine_warnings" in lines[-1]


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
