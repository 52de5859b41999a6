"""What a person sees while and after a run, in a real kernel with 2 real CPU ranks:
progress phases, library warnings folded away from errors, a closed lab saying so."""
from __future__ import annotations

import json

import pytest

from nbtools.lab.engine_output import from_report, split, warnings_html
from nbtools.lab.progress_view import Tracker

pytestmark = pytest.mark.slow   # labs, and a kernel that runs one

# What engine.run records for DDP's reducer warning (every compiled ddp-train run, per rank)
DDP_WARNING = dict(category="UserWarning", where="/venv/torch/autograd/graph.py:829", message=(
    "Grad strides do not match bucket view strides. This may indicate grad was not created "
    "according to the gradient layout contract, or that the param's strides changed since DDP "
    "was constructed.  This is not an error, but may impair performance.\ngrad.sizes() = "
    "[64, 256], strides() = [1, 64]\nbucket_view.sizes() = [64, 256], strides() = [256, 1]"))


def test_warnings_are_set_apart_and_errors_stay():
    show, warn = split(["[W1201 00:12:13.456 socket.cpp:755] reuse address",
                        "I1201 00:12:13.456 distributed.py:1] DDP Initialized with:",
                        "Traceback (most recent call last):", "RuntimeError: boom"])
    assert warn == ["[W1201 00:12:13.456 socket.cpp:755] reuse address",
                    "I1201 00:12:13.456 distributed.py:1] DDP Initialized with:"]
    assert show == ["Traceback (most recent call last):", "RuntimeError: boom"]
    texts = from_report([DDP_WARNING, DDP_WARNING])
    html = warnings_html({0: texts, 1: texts})
    # the same warning on both ranks is shown once, folded
    # (one line for the kind, with its count; the full text under it)
    assert html.startswith("<details") and html.count("Grad strides") == 2
    assert "4 x UserWarning: Grad strides" in html    # twice on each of 2 ranks
    assert "rank 0, 1" in html and "1 library warning" in html


def test_kinetos_thread_line_is_a_plain_note_not_an_error():
    """Printed by the first profiled run on an engine (torch imported on the warm-up
    thread, profiling on the main one): shown folded, once, in words, never as an ERROR."""
    from nbtools.lab.engine_output import KINETO_NOTE
    line = ("ERROR: External init callback must run in same thread as registerClient "
            "(-848995456 != -861829440)")
    show, warn = split([line, "RuntimeError: boom"])
    assert show == ["RuntimeError: boom"] and warn == [KINETO_NOTE]
    assert "ERROR" not in warnings_html({0: warn, 1: warn})


def test_tracker_names_the_phase_the_run_waits_on():
    t = Tracker([0, 1], now=0.0)
    t.update({0: dict(phase="measured", step=2, of=3, phases={"start": 1.0}),
              1: dict(phase="warm-up/compile", step=1, of=2, phases={"start": 1.5})}, now=2.0)
    assert t.phase() == "warm-up/compile"
    assert "rank 1: warm-up/compile step 1/2" in t.text(now=70.0)
    assert "(68 s)" in t.rank_text(1, now=70.0)
    t.update({1: dict(phase="done", phases={"start": 1.5, "warm-up/compile": 68.0})}, now=70.0)
    line = t.line("done", now=71.0)
    assert line.startswith("done in 71.0 s") and "warm-up/compile 68.0 s" in line
    assert "start 1.5 s" in line


def _cells(history):
    return [
        f"HISTORY = {str(history)!r}",
        "from nbtools import Lab, StepConfig\n"
        "lab = Lab(n=2, history=HISTORY, timeout=240, pg_timeout=120)",
        # a benign library warning and a real error line from the user's step, every rank
        "import sys, warnings\n"
        "def step(ctx):\n"
        "    import torch, warnings, sys\n"
        "    warnings.warn('only a hint', UserWarning)\n"
        "    print('ERROR: something real', file=sys.stderr)\n"
        "    return torch.ones(2).sum()\n"
        "run = lab.run(step, StepConfig(scenario='custom', warmup=1, steps=2, profiled=1))",
        # the panel's way: the progress text goes to a callable
        "import json\n"
        "seen = []\n"
        "lab.progress = seen.append\n"
        "run2 = lab.run(StepConfig(scenario='ddp-train', compile='default', backend='aot_eager',"
        " warmup=2, steps=2, profiled=1))\n"
        "lab.progress = True\n"
        "print(json.dumps(seen))",
        "lab.close()",
        "try:\n    lab.run(StepConfig())\nexcept Exception as e:\n"
        "    print(type(e).__name__, '|', e)",
    ]


def _texts(cell, kind):
    out = []
    for o in cell.outputs:
        if o.output_type == "stream" and o.name == kind:
            out.append(o.text)
        elif o.output_type in ("display_data", "execute_result") and kind in o.get("data", {}):
            out.append(o.data[kind])
    return "".join(out)


@pytest.mark.timeout(420)
def test_progress_warnings_and_closed_lab_in_a_kernel(tmp_path):
    from support.notebooks import tiny_notebook
    from nbtools.report.notebook import execute
    nb = execute(tiny_notebook(tmp_path / "p.ipynb", _cells(tmp_path / "runs")),
                 timeout=300, cwd=tmp_path)
    errors = [o for c in nb.cells for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    run_cell, seen_cell, closed_cell = nb.cells[2], nb.cells[3], nb.cells[5]

    # progress: the live bars were replaced in place by one line naming every phase
    final = _texts(run_cell, "text/plain")
    assert "done in" in final
    for phase in ("start", "warm-up/compile", "measured", "profiled", "parse"):
        assert f"{phase} " in final, (phase, final)
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {})
                   for o in run_cell.outputs), "a progress widget stayed in the saved output"

    # the warning is folded under the run; the real error line stays in view on stderr
    err = _texts(run_cell, "stderr")
    assert "[rank 0] ERROR: something real" in err and "[rank 1] ERROR: something real" in err
    assert "UserWarning" not in err and "only a hint" not in err
    folded = _texts(run_cell, "text/html")
    assert "<details" in folded and "only a hint" in folded and "rank 0, 1" in folded

    # the panel's callable got phase and step text per rank while it ran
    seen = json.loads(_texts(seen_cell, "stdout").strip().splitlines()[-1])
    assert any("warm-up/compile" in s and "rank 0:" in s and "rank 1:" in s for s in seen), seen
    assert "done in" in seen[-1]
    assert "Grad strides" not in _texts(seen_cell, "stderr")

    # a closed lab says so, and how to go on
    said = _texts(closed_cell, "stdout")
    assert said.startswith("LabClosed |") and "lab = Lab()" in said, said
    assert "timeout" not in said and "stuck" not in said


def test_bars_follow_each_rank_and_leave_one_line(capsys):
    """The widgets room's bars (what lab.run shows in a live kernel), driven directly."""
    import ipywidgets as W
    from nbtools.lab.progress_view import Tracker
    from nbtools.results.views import view
    t = Tracker([0, 1], now=0.0)
    bars = view("lab.progress")(t, "abcd1234")
    t.update({0: {"phase": "warm-up/compile", "step": 2, "of": 4}, 1: {"phase": "measured"}},
             now=5.0)
    bars.update(5.0)
    # phase 1 plus one of its four steps done; phase 2 just begun
    assert bars.bars[0].value == 125 and bars.bars[1].value == 200
    assert "warm-up/compile step 2/4" in bars.labels[0].value
    assert "warm-up/compile · 5 s" in bars.head.value
    parts = [bars.head, *bars.bars.values(), *bars.labels.values(), *bars.widget.children]
    parts += [getattr(w, k) for w in list(parts) for k in ("layout", "style")
              if isinstance(getattr(w, k, None), W.Widget)]
    bars.close("run abcd1234: done in 6.0 s")
    assert bars.widget.comm is None      # closed: nothing left to draw in the saved notebook
    # nor a bar, label, layout or style left open for the next tab to restore
    assert [type(w).__name__ for w in parts if w.comm is not None] == []
