"""The machine's signals through a run (issue 45): sampled on the engine (engine/signals.py,
engine/machine.py; the GPU path through pynvml over a stand-in NVML library, this machine
has no driver), as a table (analysis/samples.py), read into summary columns and flags
(analysis/machine.py) and caveats of a verdict. Fast: no lab."""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from support import fake_nvml
from nbtools.analysis import flags as F
from nbtools.analysis import machine as M
from nbtools.analysis import samples as S
from nbtools.engine import machine, quiet, signals
from support.paths import H200

MS = 1_000_000


def _spin(seconds):
    t = time.monotonic()
    while time.monotonic() - t < seconds:
        pass


# -- the CPU path, real -----------------------------------------------------------------
def test_a_cpu_rank_samples_its_process_and_host_on_the_events_clock():
    before, cpu0 = time.time_ns(), time.process_time()
    s = signals.Sampler("cpu", rank=1, run_id="r1", publish=False).start()
    time.sleep(0.4)
    _spin(0.6)
    meta, wire = s.finish()
    after, cpu1 = time.time_ns(), time.process_time()
    assert s.names == ("cpu_pct", "rss_mb", "host_cpu_pct", "host_load")
    assert meta["cores"] >= 1 and "sm_max_mhz" not in meta and meta["nvml"] == ""
    ts = wire["ts_ns"]
    assert len(ts) >= 4 and np.all(np.diff(ts) > 0)
    assert before <= ts[0] and ts[-1] <= after          # time.time_ns: the steps' clock
    table = S.from_wire(1, wire)
    assert set(table["signal"].astype(str)) == set(s.names)
    assert (table["rank"] == 1).all()
    # CPU % over each interval, summed over the run, is the CPU this process used then
    # (whatever share of a core a busy host gave the spinning loop)
    pct = np.asarray(wire["values"]["cpu_pct"])
    used = float(np.sum(pct[1:] / 100 * np.diff(ts) / 1e9))
    assert abs(used - (cpu1 - cpu0)) < 0.05 + 0.1 * (cpu1 - cpu0), (used, cpu1 - cpu0)
    assert cpu1 - cpu0 > 0.05                           # the loop did spin
    rss = table[table["signal"] == "rss_mb"]["value"]
    assert (rss > 10).all()                            # a Python process with numpy in it
    assert (table[table["signal"] == "host_load"]["value"] > 0).all()   # this process runs


def test_the_switch_turns_sampling_off():
    try:
        quiet.configure(sample_machine=False)
        assert signals.begin("cpu", 0, "x") is None and signals.current() is None
    finally:
        quiet.configure(**quiet.DEFAULTS)
    s = signals.begin("cpu", 0, "x", publish=False)
    assert signals.current() is s
    s.finish()
    assert signals.current() is None


def test_a_live_message_holds_the_last_seconds_at_ten_points_a_second():
    s = signals.Sampler("cpu", rank=0, run_id="abc", interval_s=0.01, publish=False).start()
    time.sleep(1.2)
    msg = s.recent(seconds=0.5)
    s.finish()
    assert msg["rank"] == 0 and msg["run_id"] == "abc"
    assert 2 <= len(msg["ts_ns"]) <= 6, msg["ts_ns"]       # 0.5 s at 10 a second
    assert all(len(v) == len(msg["ts_ns"]) for v in msg["values"].values())
    assert msg["ts_ns"] == sorted(msg["ts_ns"]) and msg["sent_ns"] >= msg["ts_ns"][-1]


# -- the GPU path: pynvml over a stand-in library ----------------------------------------
def test_an_h200_like_gpu_gives_every_signal_at_fifty_a_second():
    dev = fake_nvml.Device()
    with fake_nvml.installed(dev):
        s = signals.Sampler("cuda", rank=0, publish=False).start()
        assert s.interval == 0.02
        time.sleep(0.5)
        meta, wire = s.finish()
    names = set(s.names)
    assert names >= {"gpu_util_pct", "gpu_mem_util_pct", "sm_clock_mhz", "gpu_temp_c",
                     "gpu_mem_used_mb", "throttle", "gpu_power_w", "pcie_tx_mbps",
                     "pcie_rx_mbps", "nvlink_tx_mbps", "nvlink_rx_mbps", "sm_active_pct",
                     "tensor_active_pct", "dram_bw_pct", "cpu_pct", "host_load"}
    assert meta["missing"] == {} and meta["read_errors"] == {}
    assert meta["sm_max_mhz"] == 1980 and meta["power_limit_w"] == 700
    assert meta["gpu_index"] == 3 and meta["gpu_mem_total_mb"] == 141 * 1024
    v = {k: np.asarray(x) for k, x in wire["values"].items()}
    assert np.nanmedian(v["gpu_power_w"]) == 420.0 and np.nanmax(v["gpu_util_pct"]) == 87
    assert np.nanmedian(v["gpu_mem_used_mb"]) == 2048
    # counters -> rates: 1 GB/s of PCIe, 2 GiB/s per NVLink direction over 2 links
    assert np.nanmedian(v["pcie_tx_mbps"]) == pytest.approx(1000, rel=0.01)
    assert np.nanmedian(v["nvlink_rx_mbps"]) == pytest.approx(2 * 2048, rel=0.01)
    assert np.isfinite(v["pcie_tx_mbps"]).all()   # the reader's first read set the counters
    # GPM every fifth read: fewer samples, none invented in between
    assert 0 < np.isfinite(v["sm_active_pct"]).sum() < np.isfinite(v["sm_clock_mhz"]).sum()
    assert dev.calls["clock"] >= 10


def test_what_a_device_does_not_report_is_named_and_left_out():
    # no utilisation, no field counters, no NVLink, no GPM: power from nvmlDeviceGetPowerUsage
    dev = fake_nvml.Device(supported={"power", "reasons"})
    with fake_nvml.installed(dev):
        s = signals.Sampler("cuda", publish=False).start()
        time.sleep(0.2)
        meta, wire = s.finish()
    assert "gpu_power_w" in s.names and "sm_clock_mhz" in s.names
    assert "gpu_power_w" not in meta["missing"]       # nvmlDeviceGetPowerUsage gave it
    for gone in ("gpu_util_pct", "pcie_tx_mbps", "sm_active_pct"):
        assert gone not in s.names and gone in meta["missing"], gone
    assert meta["missing"]["gpu_util_pct"] == "Not Supported"
    assert np.nanmedian(wire["values"]["gpu_power_w"]) == 420.0
    assert not any("nvlink" in n for n in s.names)
    assert "nvlink_tx_mbps" not in meta["missing"] or meta["missing"]["nvlink_tx_mbps"]


def test_nvlink_from_the_devices_byte_counters_where_links_give_none():
    dev = fake_nvml.Device(supported={"util", "reasons", "power", "nvlink_count"})
    with fake_nvml.installed(dev):
        s = signals.Sampler("cuda", publish=False).start()
        time.sleep(0.2)
        meta, wire = s.finish()
    assert {"nvlink_tx_mbps", "nvlink_rx_mbps"} <= set(s.names)
    assert np.nanmedian(wire["values"]["nvlink_tx_mbps"]) == pytest.approx(3000, rel=0.01)
    assert "nvlink_tx_mbps" not in meta["missing"] and "pcie_tx_mbps" in meta["missing"]


def test_a_read_that_fails_mid_run_is_a_gap_not_a_failed_run():
    dev = fake_nvml.Device()
    with fake_nvml.installed(dev):
        s = signals.Sampler("cuda", publish=False).start()
        time.sleep(0.15)
        dev.lost.add("clock")
        time.sleep(0.15)
        meta, wire = s.finish()
    clock = np.asarray(wire["values"]["sm_clock_mhz"])
    assert np.isfinite(clock[:3]).all() and np.isnan(clock[-1])
    assert meta["read_errors"]["sm_clock_mhz"] >= 1
    table = S.from_wire(0, wire)       # a failed read leaves no row
    assert table["value"].notna().all()


def test_nvml_missing_says_why_and_the_host_signals_go_on(monkeypatch):
    monkeypatch.setattr(machine, "_nvml", None)
    monkeypatch.setattr(signals, "_gpu_reader", None)
    s = signals.Sampler("cuda", publish=False).start()    # no libnvidia-ml here
    meta, wire = s.finish()
    assert meta["nvml"].startswith("NVML unavailable") and "cpu_pct" in wire["values"]


@pytest.mark.parametrize("call", ["nvmlDeviceGetTemperature", "nvmlDeviceGetFieldValues",
                                  "nvmlGpmQueryDeviceSupport"])
def test_a_call_raising_not_an_nvmlerror_while_the_reader_is_built_is_a_missing_signal(call):
    """An OSError ("driver gone") from an NVML call while the GPU reader was built made
    every run raise; now that source's signals are missing, with the reason."""
    dev = fake_nvml.Device(raises={call: OSError("driver gone")})
    with fake_nvml.installed(dev):
        s = signals.Sampler("cuda", publish=False).start()
        meta, wire = s.finish()
    assert "sm_clock_mhz" in s.names and "cpu_pct" in wire["values"]
    gone = [n for n, why in meta["missing"].items() if why == "OSError: driver gone"]
    assert gone and not set(gone) & set(s.names), meta["missing"]


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), -0.02, 0, 1e-6, "0.1", True])
def test_a_bad_sampling_interval_is_refused_where_it_is_set(bad):
    """inf stopped the thread with a traceback; nan or a negative one sampled ~30k a second."""
    with pytest.raises(ValueError, match="interval_s=.*seconds between samples"):
        signals.Sampler("cpu", interval_s=bad, publish=False)


def test_a_full_buffer_keeps_one_uniform_spacing_over_the_whole_run(monkeypatch):
    """Halving a full buffer thinned the oldest samples again at every fill (strides 8, 4,
    2, 1 side by side); now the whole run keeps one stride. Each read is bracketed by the
    clock, so each kept sample is known by the read it came from."""
    monkeypatch.setattr(signals, "MAX_SAMPLES", 16)
    s = signals.Sampler("cpu", publish=False)
    spans = []
    for _ in range(200):
        t0 = time.time_ns()
        s._sample()
        spans.append((t0, time.time_ns()))
    s.host.close()
    reads = [next(i for i, (a, b) in enumerate(spans) if a <= t <= b) for t in s.ts]
    assert s.decimated >= 3 and len(reads) <= 16
    assert len(set(np.diff(reads))) == 1 and reads[0] == 0, reads
    assert np.diff(reads)[0] == s.stride


# -- the table, the summary columns and the flags ----------------------------------------
def _steps(rank, n=10, dur_ms=100, first=0, phase="measured"):
    return pd.DataFrame({"rank": rank, "step": range(first, first + n), "phase": phase,
                         "ts_ns": [(first + i) * 100 * MS for i in range(n)],
                         "dur_ns": dur_ms * MS})


def _gpu_report(clock, bits, util=None, cpu=None):
    n = len(clock)
    values = dict(sm_clock_mhz=clock, throttle=bits, gpu_temp_c=[60.0] * n,
                  gpu_power_w=[650.0] * n, host_load=[0.25] * n,
                  gpu_util_pct=util or [90.0] * n, cpu_pct=cpu or [40.0] * n)
    return {"machine": dict(cores=16, gpu_index=0, sm_max_mhz=1980.0, power_limit_w=700.0,
                            gpu_procs=[[11, 500.0]]),
            "signals": dict(ts_ns=[i * 100 * MS + 50 * MS for i in range(n)], values=values)}


def test_a_power_cap_with_the_clock_held_is_named_throttled():
    rep = _gpu_report([1980.0] * 10, [0] * 4 + [0x4 | 0x1] * 2 + [0] * 4)
    cols = M.columns({0: rep}, _steps(0)).assign(host="h")
    row = cols.iloc[0]
    assert row["throttle_seen"] == "power cap" and row["throttle_steps"] == "4-5"
    assert row["clock_low_steps"] == "" and row["sm_clock_drop_pct"] == 0
    got = M.flags(cols)
    assert got == ["rank 0: the GPU reported power cap while the measured steps ran "
                   "(steps 4-5)"]
    assert F.identify(got[0]) == "throttled"


def test_a_clock_that_falls_within_the_measured_steps_is_named():
    clock = [1980.0] * 6 + [1860.0] * 4          # 6 % down, above 90 % of the maximum
    cols = M.columns({0: _gpu_report(clock, [0] * 10)}, _steps(0)).assign(host="h")
    assert cols.loc[0, "sm_clock_drop_pct"] == pytest.approx(100 * 120 / 1980)
    got = M.flags(cols)
    assert got == ["rank 0: SM clock fell 6.1 % below its highest while the measured steps "
                   "ran (steps 6-9): no throttle reason reported"]
    assert F.identify(got[0]) == "clock-drop"
    # in the warm-up only: not the measured steps', nothing said
    steps = pd.concat([_steps(0, n=6, phase="warmup"), _steps(0, n=4, first=6)])
    clock = [1860.0] * 6 + [1980.0] * 4
    cols = M.columns({0: _gpu_report(clock, [0x4] * 6 + [0] * 4)}, steps).assign(host="h")
    assert M.flags(cols) == []


def test_a_low_clock_is_said_once_as_clock_low():
    clock = [1980.0] * 5 + [1410.0] * 5
    cols = M.columns({0: _gpu_report(clock, [0] * 5 + [0x4] * 5)}, _steps(0)).assign(host="h")
    assert [F.identify(f) for f in M.flags(cols)] == ["clock-low"]


def test_utilisation_and_the_process_cpu_are_read_over_the_measured_steps():
    n = 20                                               # 17 measured steps: 1.7 s
    util, cpu = [5.0] * n, [99.0] * n
    steps = pd.concat([_steps(0, n=3, phase="warmup"), _steps(0, n=n - 3, first=3)])
    util[:3], cpu[:3] = [100.0] * 3, [20.0] * 3          # warm-up: left out
    # NVML's reading covers up to a second before it: the first second's readings hold
    # the warm-up too, and are left out (samples at 350-1250 ms)
    util[3:13] = [60.0] * 10
    cols = M.columns({0: _gpu_report([1980.0] * n, [0] * n, util, cpu)}, steps)
    assert cols.loc[0, "gpu_util_pct"] == 5.0 and cols.loc[0, "cpu_pct"] == 99.0


def test_measured_steps_shorter_than_nvmls_period_have_no_utilisation_reading():
    """1 x H200, session 23: 20 steps of 2.7 ms (54 ms) read 'the GPU busy 0 %' from a
    reading that was mostly the time before them, on a GPU-bound step."""
    util, cpu = [0.0] * 10, [99.0] * 10
    steps = pd.concat([_steps(0, n=3, phase="warmup"), _steps(0, n=7, first=3)])
    cols = M.columns({0: _gpu_report([1980.0] * 10, [0] * 10, util, cpu)}, steps)
    assert np.isnan(cols.loc[0, "gpu_util_pct"]) and cols.loc[0, "cpu_pct"] == 99.0


def test_short_steps_between_samples_read_the_next_sample():
    # two 1-ms steps and samples every 100 ms, the first 80 ms after them
    steps = pd.DataFrame({"rank": 0, "step": [0, 1], "phase": "measured",
                          "ts_ns": [0, 1 * MS], "dur_ns": 1 * MS})
    smp = S.from_wire(0, dict(ts_ns=[-20 * MS, 80 * MS, 180 * MS],
                              values=dict(cpu_pct=[10.0, 95.0, 30.0])))
    v, st = S.during(smp, steps, 0, "cpu_pct")
    assert v.tolist() == [95.0] and st.tolist() == [1]


def test_a_run_saved_before_the_samples_table_keeps_its_signals():
    ranks = {"0": {"machine": dict(cores=4, samples=dict(
        ts_ns=[1, 2, 3], procs_running=[2.0, 4.0, 6.0], sm_mhz=[1980.0] * 3,
        temp_c=[40.0] * 3, power_w=[100.0] * 3, reasons=[0, 4, 0]))}}
    got = S.from_machine_reports(ranks)
    load = got[got["signal"] == "host_load"]["value"].tolist()
    assert load == [0.5, 1.0, 1.5]                       # per core, as host_load always was
    assert set(got["signal"].astype(str)) == {"host_load", "sm_clock_mhz", "gpu_temp_c",
                                              "gpu_power_w", "throttle"}
    assert S.from_machine_reports({"0": {"machine": {"samples": "junk"}}}).empty


def test_a_verdict_names_throttled_and_falling_clock_runs_in_its_caveats():
    from nbtools.results.comparison import Comparison
    from nbtools.results.run import Run
    from nbtools.config.step_config import StepConfig

    def run(flag):
        r = Run(config=StepConfig(), summary=pd.DataFrame({"rank": [0], "step_ms": [2.0]}),
                steps=_steps(0))
        r.flags = [flag] if flag else []
        return r
    hot = F.make("throttled", rank=0, why="power cap", steps="3-5")
    fell = F.make("clock-drop", rank=0, pct="6.1", steps="6-9", why="power cap")
    cmp = Comparison(run(hot), run(fell))
    assert "1 of 2 runs with the GPU throttling (see their flags)" in cmp.caveats
    assert "1 of 2 runs with the SM clock falling (see their flags)" in cmp.caveats
    assert Comparison(run(""), run("")).caveats == ()


def test_sm_activity_counts_the_gpm_readings_whose_period_lies_inside_the_measured_steps():
    """A GPM metric covers the time since the previous GPM read (every 5th sample here: 500
    ms); the reading that covers the warm-up is left out, and 2 steps of 100 ms have none
    (1 x H200, session 23: 20 steps of 2.8 ms read 'SMs active 0 %')."""
    n = 20
    sm = [np.nan] * n
    sm[4], sm[9], sm[14], sm[19] = 99.0, 20.0, 20.0, 20.0      # at 450, 950, 1450, 1950 ms
    rep = _gpu_report([1980.0] * n, [0] * n)
    rep["signals"]["values"]["sm_active_pct"] = sm
    steps = pd.concat([_steps(0, n=3, phase="warmup"), _steps(0, n=n - 3, first=3)])
    assert M.columns({0: rep}, steps).loc[0, "sm_active_pct"] == 20.0
    short = pd.concat([_steps(0, n=3, phase="warmup"), _steps(0, n=2, first=3)])
    assert np.isnan(M.columns({0: rep}, short).loc[0, "sm_active_pct"])


@pytest.mark.parametrize("junk", [dict(ts_ns=5), dict(ts_ns=[1, 2], procs_running=["x", 1]),
                                  dict(ts_ns=[1, 2], procs_running=[1.0, 2.0], cores="x")])
def test_an_old_run_with_malformed_machine_samples_loses_only_their_lanes(tmp_path, junk):
    """issue 54: an old-format run (no samples.parquet) whose run.json held a malformed
    machine.samples was marked damaged as a whole; now it loads, that rank's lanes are
    left out and a flag says so, the other rank's lanes stay."""
    import json
    from nbtools import load_traces
    from nbtools.results.history import History
    h200 = H200
    run = load_traces(sorted(h200.glob("tp_off_rank*.json.gz")))
    History(tmp_path / "h").add(run)
    (run.folder / "samples.parquet").unlink(missing_ok=True)
    meta = json.loads((run.folder / "run.json").read_text())
    cores = junk.pop("cores", 4)
    meta["ranks"]["0"]["machine"] = dict(cores=cores, samples=junk)
    meta["ranks"]["1"]["machine"] = dict(cores=4, samples=dict(
        ts_ns=[1, 2, 3], procs_running=[2.0, 4.0, 6.0], sm_mhz=[1980.0] * 3))
    (run.folder / "run.json").write_text(json.dumps(meta))
    loaded = History.load(tmp_path / "h")
    assert not loaded.damaged and len(loaded) == 1, loaded.damaged
    back = loaded.runs[0]
    assert len(back.events) == len(run.events) and len(back.steps) == len(run.steps)
    assert set(back.samples["rank"]) == {1}
    assert any("machine samples of rank(s) 0 cannot be read" in f for f in back.flags), \
        back.flags


# -- one spelling of each signal name (issue 53) -----------------------------------------
def test_every_signal_an_h200_like_gpu_and_its_host_give_is_one_the_schema_defines():
    from nbtools.schema.signals import BY_NAME, SIGNALS
    with fake_nvml.installed(fake_nvml.Device()):
        s = signals.Sampler("cuda", rank=0, publish=False)
        s.host.close()
    assert set(s.names) == set(BY_NAME), set(s.names) ^ set(BY_NAME)
    assert len(BY_NAME) == len(SIGNALS)          # no name defined twice


@pytest.mark.parametrize("module", ["engine/machine.py", "engine/signals.py",
                                    "analysis/samples.py"])
def test_the_engine_and_the_samples_table_spell_no_signal_name_of_their_own(module):
    """The readers, the sampler and the samples table take every signal name (and the live
    message's key) from schema/signals.py: a string spelled in one of them that names a
    signal is a second definition, free to drift from the first."""
    import ast
    from pathlib import Path

    from nbtools.schema.signals import BY_NAME, KEY
    path = Path(S.__file__).parents[1] / module
    spelled = sorted({n.value for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                      if isinstance(n, ast.Constant) and isinstance(n.value, str)
                      and (n.value in BY_NAME or n.value == KEY)})
    assert not spelled, f"{module} spells {spelled}: take them from nbtools.schema.signals"
