"""StepConfig(stack=True): the profiler's Python frames become each op's tooltip line naming
the user's innermost frames (file:line function); real torch.profiler on CPU, and a real lab
run on gloo."""
from __future__ import annotations

import inspect

import pytest
import torch

from nbtools import StepConfig

LAB = "shared"     # the worker's lab (tests/conftest.py): history counted from here


def _my_layer(x):
    return torch.mm(x, x)           # the frame (its def line) the tooltip must name


def _my_model(x):
    return _my_layer(x).relu()


def _line_of(fn) -> int:
    """Kineto's Python frames give the function's first line (where it is defined)."""
    return inspect.getsourcelines(fn)[1]


def test_stack_names_the_users_innermost_frames_and_drops_python_frames_as_events():
    from nbtools.schema import tables
    from nbtools.trace.details import DETAIL_COLUMNS, detail_rows, details_wire
    from nbtools.trace.load import events_from_profiler
    acts = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True) as prof:
        _my_model(torch.randn(16, 16))
    rows = detail_rows(stack=True)
    events = tables.from_wire(tables.EVENT_COLUMNS, events_from_profiler(prof, 0, details=rows))
    details = tables.from_wire(DETAIL_COLUMNS, details_wire(rows))
    mm = details[details["name"] == "aten::mm"]["detail"].tolist()
    assert len(mm) == 1, details
    line_mm, line_model = _line_of(_my_layer), _line_of(_my_model)
    want = (f"stack: test_timeline_stack.py:{line_mm} _my_layer ← "
            f"test_timeline_stack.py:{line_model} _my_model")
    assert mm[0].startswith("inputs: f32[16, 16], f32[16, 16]") and want in mm[0], mm[0]
    # torch's, pytest's and the standard library's frames are not the user's
    assert "module.py" not in mm[0] and "python.py" not in mm[0] and "profiler.py" not in mm[0]
    # the Python frames are not ops: no "test_...py(12): _my_layer" event in the table
    assert not events["name"].astype(str).str.contains(r"\.py\(\d+\)").any()
    assert "aten::mm" in set(events["name"].astype(str))


def test_without_stack_no_frames_are_kept():
    from nbtools.trace.details import detail_rows
    assert set(detail_rows()) == {"rank", "ts_ns", "name", "detail"}


def test_stack_must_be_a_bool():
    from nbtools.config.step_config import ConfigError
    with pytest.raises(ConfigError, match="stack='yes'"):
        StepConfig(stack="yes")
    assert StepConfig().stack is False      # with_stack slows the profiled steps: opt in


def _my_step(ctx):
    x = torch.randn(32, 32)
    y = torch.mm(x, x)              # the line the tooltip must name
    torch.distributed.all_reduce(y)
    return y.sum()




def test_lab_run_with_stack_puts_the_users_line_in_the_timeline_tooltip(lab):
    from nbtools.ui.timeline import Timeline
    run = lab.run(_my_step, StepConfig(scenario="custom", stack=True, warmup=1, steps=1,
                                       profiled=1))
    assert run.ok, run.error if hasattr(run, "error") else run
    want = f"test_timeline_stack.py:{_line_of(_my_step)} _my_step"
    tl = Timeline(run, width=20_000)
    d = dict(tl.events_source.data, **tl.decode())
    names = d["name"]
    hits = {(r, n) for r, n, t in zip(d["rank"], names, d["detail"]) if want in str(t)}
    assert {(0, "aten::mm"), (1, "aten::mm")} <= hits, sorted(set(map(str, d["detail"])))[:8]
    # the collective's tooltip names the step's line as well, beside its group
    coll = {str(n): t for n, t in zip(names, d["detail"]) if "allreduce" in str(n) and t}
    assert any(f"stack: {want}" in t for t in coll.values()), coll   # then gloo's "not recorded"s
    assert not any("runpy" in str(t) or "<string>" in str(t) for t in d["detail"])
    # and without the switch, no stacks
    plain = lab.run(_my_step, StepConfig(scenario="custom", warmup=1, steps=1, profiled=1))
    assert not plain.event_details["detail"].str.contains("stack: ").any()


def test_h200_nccl_traces_give_collective_tooltips():
    """The committed 2 x H200 traces (real NCCL, torch 2.11): their kernels' and
    record_param_comms' args say the collective, group, ranks, elements and dtype."""
    from nbtools import load_traces
    from nbtools.common.package_data import h200_traces_dir
    from nbtools.ui.timeline import Timeline
    files = sorted(h200_traces_dir().glob("tp_off_rank*.json.gz"))
    assert load_traces(files).event_details.empty          # the second pass is opt-in
    run = load_traces(files, details=True)
    tl = Timeline(run, width=40_000)        # wide enough that no NCCL kernel is merged
    d = dict(tl.events_source.data, **tl.decode())
    names = d["name"]
    nccl = [(r, t) for r, n, t, c in zip(d["rank"], names, d["detail"], d["count"])
            if n.startswith("ncclDevKernel_AllReduce") and c == 1]
    assert {r for r, _ in nccl} == {0, 1} and all(nccl_t for _, nccl_t in nccl), nccl[:3]
    assert nccl[0][1] == ("collective: allreduce · group: 0 · group size: 2 · in elements: "
                          "4096 · out elements: 4096 · dtype: Float · ranks: [0, 1] · "
                          "16 KB moved in"), nccl[0][1]
    # these traces carry no "Seq" (torch 2.11's NCCL args): the tooltip does not invent one
    assert not any("seq:" in t for _, t in nccl)


def test_a_trace_without_args_reads_no_details_and_says_nothing_wrong():
    """The committed reduce-overhead traces (graph replays: no op carries input dims or
    collective args): the second pass finds nothing, which is not a problem to flag."""
    from nbtools import load_traces
    from nbtools.common.package_data import h200_traces_dir
    files = sorted(h200_traces_dir().glob("tp_reduce-overhead_rank*.json.gz"))
    run = load_traces(files, details=True)
    assert run.event_details.empty
    assert not [f for f in run.flags if "tooltip" in f], run.flags
