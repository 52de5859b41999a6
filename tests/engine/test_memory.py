"""StepConfig(memory=True): the profiler's allocator events per rank (real torch.profiler on
CPU), carried into run.memory, saved and loaded, drawn as the memory lane."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import torch

from nbtools import StepConfig
from nbtools.engine.memory import MemoryRecorder
from nbtools.results.run import Run

LAB = "shared"     # the worker's lab (tests/conftest.py): history counted from here


def test_recorder_sums_the_profilers_allocations_on_cpu():
    cfg = StepConfig(memory=True)
    rec = MemoryRecorder(cfg, torch.device("cpu"), rank=3)
    rec.start()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                **rec.profiler_kwargs()) as prof:
        keep = torch.empty(1 << 20, dtype=torch.uint8)        # 1 MiB held to the end
        tmp = torch.empty(4 << 20, dtype=torch.uint8)         # 4 MiB, then freed
        del tmp
    out = rec.collect(prof)
    mem = pd.DataFrame(out["memory"])
    assert len(mem) >= 3 and (mem["rank"] == 3).all()
    assert mem["ts_ns"].is_monotonic_increasing
    alloc = mem["allocated"].to_numpy()
    assert alloc.max() >= (5 << 20) and alloc[-1] >= (1 << 20) and alloc[-1] < alloc.max()
    assert np.isnan(mem["reserved"]).all()           # the CPU allocator has no reserve
    assert np.isnan(out["graph_pool_mb"])
    del keep
    off = MemoryRecorder(StepConfig(), torch.device("cpu"), 0)
    assert off.profiler_kwargs() == {} and off.collect(None) == {}


def test_memory_must_be_a_bool():
    from nbtools.config.step_config import ConfigError
    with pytest.raises(ConfigError, match="memory='yes'"):
        StepConfig(memory="yes")




def test_lab_run_records_memory_per_rank_and_keeps_it(lab, tmp_path):
    from nbtools.ui.timeline import Timeline
    run = lab.run(StepConfig(memory=True, warmup=1, steps=2, profiled=1))
    assert run.ok, run.errors
    assert set(run.memory["rank"]) == {0, 1}
    assert (run.memory["allocated"] > 0).any()
    tl = Timeline(run)
    assert tl.memory.figure.visible and set(tl.memory.source.data["rank"]) == {0, 1}
    # tooltips: input shapes of the profiled ops (record_shapes), joined to their boxes
    assert run.event_details["detail"].astype(str).str.startswith("inputs: f32[").any()
    assert any(str(d).startswith("inputs: ") for d in tl.decode()["detail"])
    # sizes for people on CPU: KB, and words where the CPU has no value (never NaN or 0.0 MB)
    labels = tl.memory.figure.yaxis.major_label_overrides
    assert all(" KB)" in v or " MB)" in v for v in labels.values()), labels
    assert not any("0.0 MB" in v for v in labels.values()), labels
    d = tl.memory.source.data
    assert set(d["res"]) == {"not measured on CPU"} and "nan" not in " ".join(d["alloc"]).lower()
    # gloo's collectives: the bytes their inputs hold, and what the trace does not record
    box = tl.decode()
    gloo = [t for n, t in zip(box["name"], box["detail"]) if str(n).startswith("gloo:")]
    assert gloo and all("group, ranks: not recorded in the trace" in t for t in gloo), gloo[:3]
    assert any(re.search(r"\d (K|M)?B in", t) for t in gloo), gloo[:3]
    back = Run.load(run.save(tmp_path / "r"))
    assert len(back.memory) == len(run.memory) and not back.damage
    assert len(back.event_details) == len(run.event_details)
    plain = lab.run(StepConfig(warmup=1, steps=2, profiled=1))
    assert plain.memory.empty and not Timeline(plain).memory.figure.visible


def test_panel_saves_the_shown_run_for_perfetto(lab, tmp_path):
    import json
    from nbtools.widgets.panel import Panel
    panel = Panel(lab, StepConfig(memory=True, warmup=1, steps=2, profiled=1),
                  export_path=tmp_path / "findings.html")
    assert "memory" in panel.controls
    run = panel.run()
    assert run.ok and not run.memory.empty
    out = panel.save_perfetto()
    assert out == tmp_path / "findings.perfetto.json"
    doc = json.loads(out.read_text())
    assert {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"} \
        == {"rank 0", "rank 1"}
    assert "ui.perfetto.dev" in panel.export_status.value


def test_a_cpu_rank_without_reserved_bytes_still_draws_its_allocations():
    """CPU ranks report no reserved bytes (NaN): the lane's peak must come from what was
    allocated, or every height is NaN and the lane draws nothing (seen in notebook 01)."""
    import numpy as np
    import pandas as pd
    from nbtools.ui.timeline.memory import memory_data
    mem = pd.DataFrame(dict(rank=[0, 0, 0], ts_ns=[10, 20, 30], allocated=[1e6, 2e6, 5e5],
                            reserved=[np.nan] * 3, graph_pool=[0.0] * 3))
    data, labels = memory_data(mem, [0], 0)
    assert np.isfinite(data["top"]).all() and data["top"].min() < data["bottom"].min()
    assert labels == {0: "r0 memory (peak 1.91 MB)"}     # 2e6 bytes: units.fmt_bytes
