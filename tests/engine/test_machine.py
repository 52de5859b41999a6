"""The machine's state is part of the run (engine/signals.py samples it, analysis/machine.py
makes columns and flags), and what else the engine does beside the timed steps is
switchable (engine/quiet.py)."""
from __future__ import annotations

import gc
import os

import pandas as pd
import pytest

from nbtools.analysis import flags as F
from nbtools.analysis import machine as M
from nbtools.engine import machine, quiet, signals

MS = 1_000_000


def _steps(rank, first=0, n=10, dur_ms=100):
    return pd.DataFrame({"rank": rank, "step": range(first, first + n), "phase": "measured",
                         "ts_ns": [i * 100 * MS for i in range(n)], "dur_ns": dur_ms * MS})


def _report(sm, reasons, procs=((11, 500.0),), pid=11, gpu=0, running=None):
    n = len(sm)
    return {"machine": dict(cores=16, pid=pid, gpu_index=gpu, sm_max_mhz=1980.0,
                            power_limit_w=700.0, gpu_procs=[list(p) for p in procs]),
            "signals": dict(ts_ns=[i * 100 * MS + 50 * MS for i in range(n)],
                            values=dict(host_load=[x / 16 for x in running or [4.0] * n],
                                        sm_clock_mhz=sm, gpu_temp_c=[60.0] * n,
                                        gpu_power_w=[650.0] * n, throttle=reasons))}


def test_a_throttled_rank_and_a_shared_gpu_are_named():
    sm = [1980.0] * 3 + [1410.0] * 3 + [1980.0] * 3 + [1410.0]
    reasons = [0] * 3 + [0x4] * 3 + [0] * 3 + [0x4]
    reports = {0: _report([1980.0] * 10, [0] * 10, procs=((11, 500.0), (99, 2000.0)), gpu=3),
               1: _report(sm, reasons)}
    steps = pd.concat([_steps(0), _steps(1)])
    cols = M.columns(reports, steps)
    r1 = cols.set_index("rank").loc[1]
    assert r1["sm_clock_min_mhz"] == 1410 and r1["throttle"] == "power cap"
    assert r1["clock_low_steps"] == "3-5, 9"
    summary = cols.assign(host="gpuhost")
    got = M.flags(summary)
    assert got == ["rank 1: SM clock 1410 of 1980 MHz during steps 3-5, 9: power cap",
                   "another process used GPU 3: 1 process(es) besides rank 0's engine"]
    assert [F.identify(f) for f in got] == ["clock-low", "gpu-shared"]
    assert (cols["host_load"] == 0.25).all()        # 4 runnable tasks on 16 cores


def test_a_clock_low_outside_the_timed_steps_and_a_quiet_host_say_nothing():
    # the low sample lands after the last step ended: an idle GPU clocks down
    rep = _report([1980.0] * 10 + [345.0], [0] * 10 + [0x1])
    rep["signals"]["ts_ns"][-1] = 5_000 * MS
    cols = M.columns({0: rep}, _steps(0))
    assert cols.loc[0, "clock_low_steps"] == "" and M.flags(cols.assign(host="h")) == []


def test_a_busy_host_is_named_once_per_host():
    reports = {r: _report([1980.0] * 4, [0] * 4, running=[40.0, 52.0, 48.0, 44.0])
               for r in (0, 1)}
    for rep in reports.values():     # every core busy, the two ranks one core each
        rep["signals"]["values"].update(cpu_pct=[100.0] * 4, host_cpu_pct=[100.0] * 4)
    cols = M.columns(reports, pd.concat([_steps(0), _steps(1)])).assign(host="h1")
    assert M.flags(cols) == ["host busy: load 2.9 per core on h1 while rank(s) 0, 1 timed "
                             "steps; processes other than the ranks kept 14.0 of its 16 cores "
                             "busy"]
    # a summary saved before the ranks' CPU was read: judged and said by its load, as then
    old = cols.drop(columns=["host_other_cores"])
    assert M.flags(old) == ["host busy: load 2.9 per core on h1 while rank(s) 0, 1 timed steps"]


def test_the_cpu_sampler_reads_the_host_and_needs_no_nvml():
    got, wire = signals.Sampler("cpu", publish=False).start().finish()
    assert got["nvml"] == "" and "sm_max_mhz" not in got
    assert "sm_clock_mhz" not in wire["values"]     # no NaN GPU columns to save
    assert len(wire["ts_ns"]) >= 2
    assert all(x * got["cores"] >= 1 for x in wire["values"]["host_load"])   # this process runs
    assert machine.procs_running() >= 1


def test_switches_are_checked_and_restored():
    with pytest.raises(ValueError, match="unknown switch"):
        quiet.configure(progress=False)
    try:
        assert quiet.configure(**quiet.BEFORE)["gc_freeze"] is False
        with quiet.timed_steps():
            assert gc.get_freeze_count() == 0 and quiet.poll_interval(0.25) == 0.25
    finally:
        quiet.configure(**quiet.DEFAULTS)
    quiet.collect()                                   # an engine's first model, before it is built
    with quiet.timed_steps():
        assert gc.get_freeze_count() > 0              # the engine's objects are not re-walked
        assert quiet.poll_interval(0.25) == quiet.WATCH_TIMED_S
    # still frozen for the next runs, which walk only what is new
    assert gc.get_freeze_count() > 0 and quiet.poll_interval(0.25) == 0.25
    quiet.thaw()
    assert gc.get_freeze_count() == 0
    assert quiet.publish_step("warmup") and not quiet.publish_step("measured")


def test_a_dropped_model_is_freed_without_walking_the_frozen_start_up_heap():
    import weakref

    class Held:         # a model, a process group: in reference cycles, as compiled and
        pass            # FSDP2 modules and torch's groups are

    def cycle():
        x = Held()
        x.me = x
        return x, weakref.ref(x)
    quiet.thaw()
    group, group_gone = cycle()                       # made before the first run
    quiet.collect()                                   # the first model's release_model
    frozen = gc.get_freeze_count()
    assert frozen > 0
    model, model_gone = cycle()                       # the run's model
    with quiet.timed_steps():
        pass
    # the model is not frozen: the count does not grow (it may shrink: another thread of
    # the test process can drop a frozen object meanwhile, as one did under xdist)
    assert gc.get_freeze_count() <= frozen
    del model
    quiet.collect()                                   # the next model's release_model
    assert model_gone() is None, "the dropped model was not freed"
    assert gc.get_freeze_count() <= frozen
    del group                                         # a failure drops the group
    quiet.collect()
    assert group_gone() is not None                   # frozen: an ordinary collection keeps it
    quiet.collect(everything=True)                    # release_peers' release_model
    assert group_gone() is None, "the frozen group was not freed after the failure"
    assert gc.get_freeze_count() > 0
    # a switch turned off and on (benchmarks/fidelity.py) thaws with a model held: the
    # timed steps freeze it too, and the next release walks everything to free it
    model, model_gone = cycle()
    quiet.thaw()
    with quiet.timed_steps():
        assert gc.get_freeze_count() > 0
    del model
    quiet.collect()
    assert model_gone() is None, "a model frozen by the timed steps was not freed"
    quiet.thaw()


def test_the_frame_counter_pauses_for_the_timed_steps_and_keeps_its_count():
    torch = pytest.importorskip("torch")
    from nbtools.engine.compile_recorder import CompileRecorder
    f = torch.compile(lambda x: x * 2 + 1, backend="eager")
    rec = CompileRecorder()
    rec.install()
    rec.start_run()
    try:
        x = torch.ones(4)
        f(x)
        f(x)
        before = rec._hits.read()[0]
        assert before >= 1
        with quiet.timed_steps(rec, warmed=True):
            for _ in range(5):
                f(x)
        assert rec._hits.read()[0] == before          # not counted while paused
        f(x)
        assert rec._hits.read()[0] == before + 1      # counting again, nothing lost
    finally:
        rec.finish_run(0)
        rec.uninstall()
        torch.compiler.reset()


def test_cupti_is_torn_down_after_profiles_unless_graphs_or_the_person_say_otherwise(monkeypatch):
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    monkeypatch.setattr(quiet, "_teardown_ours", False)
    monkeypatch.setattr(quiet, "_graphs_seen", False)
    assert quiet.cupti_teardown("13.0", False) and os.environ["TEARDOWN_CUPTI"] == "1"
    assert quiet.cupti_teardown(None, False)             # CPU build: harmless, kept on
    assert not quiet.cupti_teardown("12.4", False)       # torch's own crash workaround
    assert "TEARDOWN_CUPTI" not in os.environ            # ours, taken back
    assert quiet.cupti_teardown("12.8", False)
    try:
        quiet.configure(**quiet.BEFORE)
        assert not quiet.cupti_teardown("12.8", False) and "TEARDOWN_CUPTI" not in os.environ
    finally:
        quiet.configure(**quiet.DEFAULTS)
    # a graph-capturing config: off for it and for the engine's life after it
    assert not quiet.cupti_teardown("12.8", True)
    assert not quiet.cupti_teardown("12.8", False) and "TEARDOWN_CUPTI" not in os.environ
    # the person's own setting wins either way
    monkeypatch.setattr(quiet, "_graphs_seen", False)
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")
    assert not quiet.cupti_teardown("12.8", False) and os.environ["TEARDOWN_CUPTI"] == "0"
    monkeypatch.setenv("TEARDOWN_CUPTI", "1")
    assert quiet.cupti_teardown("12.8", True) and os.environ["TEARDOWN_CUPTI"] == "1"


def _cpu_report(host_load, cpu_pct, host_cpu_pct, cores=2):
    """A CPU rank's signals through its 10 measured steps: runnable tasks (per core, as the
    wire holds them), its own CPU and the host's busy share."""
    n = 10
    return {"host": "vm", "machine": dict(cores=cores, pid=11),
            "signals": dict(ts_ns=[i * 100 * MS + 50 * MS for i in range(n)],
                            values=dict(host_load=[host_load] * n, cpu_pct=[cpu_pct] * n,
                                        host_cpu_pct=[host_cpu_pct] * n))}


def test_the_ranks_own_load_is_not_a_busy_host():
    # issue 54: 2 CPU ranks on a quiet 2-core host, each a core busy: 2 runnable per core,
    # every core busy, all of it the ranks' own -> no flag (it fired on every such run)
    quiet = {r: _cpu_report(2.0, 98.0, 100.0) for r in (0, 1)}
    cols = M.columns(quiet, pd.concat([_steps(0), _steps(1)])).assign(host="vm")
    assert cols["host_other_cores"].tolist() == pytest.approx([0.04, 0.04])
    assert M.flags(cols) == []
    assert not M.busy_host(cols).any()
    # a busy loop beside them: the ranks get 2/3 of a core each, the third is someone else's
    loop = {r: _cpu_report(1.5, 66.0, 100.0) for r in (0, 1)}
    cols = M.columns(loop, pd.concat([_steps(0), _steps(1)])).assign(host="vm")
    (flag,) = M.flags(cols)
    assert flag == ("host busy: load 1.5 per core on vm while rank(s) 0, 1 timed steps; "
                    "processes other than the ranks kept 0.7 of its 2 cores busy")
    assert F.identify(flag) == "host-busy"
    # a flag saved by an older version is still recognised as this flag
    assert F.identify("host busy: load 2.0 per core on vm while rank(s) 0, 1 timed steps") \
        == "host-busy"


def test_a_rank_whose_sampler_read_no_host_share_still_counts_the_others():
    # a full-suite run on a 2-core host with a loop per core: rank 0's sampler got no
    # /proc/stat reading at all, and the host's other cores came out NaN for both ranks
    starved = _cpu_report(1.5, 66.0, 100.0)
    del starved["signals"]["values"]["host_cpu_pct"]
    reports = {0: starved, 1: _cpu_report(1.5, 66.0, 100.0)}
    cols = M.columns(reports, pd.concat([_steps(0), _steps(1)])).assign(host="vm")
    assert cols["host_cpu_pct"].tolist() == [100.0, 100.0]
    assert cols["host_other_cores"].tolist() == pytest.approx([0.68, 0.68])
    assert F.identify(M.flags(cols)[0]) == "host-busy"


def test_a_run_shorter_than_a_host_window_still_reads_the_host_at_its_end():
    # tp-mlp-infer's 12 steps took 0.15 s: no /proc/stat window closed, and a busy host
    # went unseen; the last read of a run takes the share over its shorter window
    import time
    r = machine.HostReader()
    try:
        time.sleep(machine.LAST_WINDOW_S + 0.02)
        assert r.read()[2] != r.read()[2]                  # NaN: inside a window
        assert 0.0 <= r.read(last=True)[2] <= 100.0
    finally:
        r.close()
