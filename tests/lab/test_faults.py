"""Faults on real engines (2 CPU ranks, gloo): nothing outlives the client, nothing listens
beyond loopback, a dead/hung/failed/interrupted rank is reported clearly and the next run
works without lab.restart()."""
import glob
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import psutil
import pytest

from nbtools import Lab, StepConfig
from nbtools.results.errors import RunFailed, RunTimeout
from nbtools.results.history import History

pytestmark = pytest.mark.slow

from support.lab_steps import SMALL as _SMALL

SMALL = dict(_SMALL, profiled=0)      # no timeline: these tests count ranks and heals
CUSTOM = StepConfig(scenario="custom", warmup=0, steps=1, profiled=0)


# the conftest lab, with what this module needs beside its defaults
LAB = dict(timeout=120, pg_timeout=60)


def _lab_pids(lab) -> list:
    """The processes of this lab: controller, engines and spares with all descendants."""
    out = []
    for pid, _ in lab._guard.pids:
        try:
            p = psutil.Process(pid)
            out += [p] + p.children(recursive=True)
        except psutil.Error:
            pass
    return out


def _gone(proc) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE    # dead, memory freed, not reaped yet
    except psutil.NoSuchProcess:
        return True


# -- leaks -----------------------------------------------------------------------------
CLIENT = textwrap.dedent("""
    import json, sys, psutil
    from nbtools import Lab, StepConfig
    lab = Lab(n=2, history=None)
    lab.run(StepConfig(warmup=0, steps=1, profiled=0))
    assert sorted(lab.pool.spares) == [0, 1]
    for spare in lab.pool.spares.values():
        lab.pool.await_engine(lab.client, spare, 120)
    pids = [p.pid for p in psutil.Process().children(recursive=True)]
    print(json.dumps(dict(pids=pids, workdir=str(lab.workdir), guard=lab._guard.proc.pid)),
          flush=True)
    sys.stdin.read()        # until killed
""")


@pytest.mark.parametrize("also_guard", [False, True], ids=["client", "client-and-its-guard"])
def test_sigkill_of_the_client_leaves_no_process(also_guard):
    """The guard process cleans up at once; when it is killed too, every engine and the
    controller still go on their own (each watches the client's pid)."""
    import json
    # spares right after Lab() whatever the cores (on 2 they wait for a first fault): they
    # must go too
    client = subprocess.Popen([sys.executable, "-c", CLIENT], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, NBTOOLS_SPARES_WITH_RANKS="0"))
    try:
        line = client.stdout.readline()
        assert line, "the client did not start its lab"
        info = json.loads(line)
        procs = [psutil.Process(p) for p in info["pids"]]
        # controller + its schedulers, 2 engines + nannies, 2 spares + nannies, the guard
        assert len(procs) >= 8 and os.path.isdir(info["workdir"])
    finally:
        if also_guard:
            os.kill(info["guard"], signal.SIGKILL)
        client.kill()
        client.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(_gone(p) for p in procs):
        time.sleep(0.2)
    left = [(p.pid, " ".join(p.cmdline())[:80]) for p in procs if not _gone(p)]
    assert left == []
    if not also_guard:      # the folder is the guard's job
        assert not os.path.exists(info["workdir"])
    else:
        import shutil
        shutil.rmtree(info["workdir"], ignore_errors=True)


def test_failed_start_cleans_up_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))   # the lab's folder goes here
    mine = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(TimeoutError):
        Lab(n=2, history=None, start_timeout=0.5)     # engines cannot register that fast
    new = [p for p in psutil.Process().children(recursive=True) if p.pid not in mine]
    assert [p.pid for p in new if not _gone(p)] == []
    assert glob.glob(str(tmp_path / "nbtools-lab-*")) == []


def test_engine_that_dies_before_registering_is_named_with_its_words(tmp_path, monkeypatch):
    """An engine that cannot start (a broken environment) is named at once with what it
    printed, not waited for until start_timeout, and nothing is left behind."""
    from nbtools.lab import pool
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(pool, "ENGINE_CMD", [sys.executable, "-c", "import sys; print("
                        "'this environment cannot start an engine', file=sys.stderr); "
                        "sys.exit(3)"])
    mine = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(RuntimeError, match=r"engine\(s\) ended before registering: local rank 0 "
                       r"\(exit code 3\): this environment cannot start an engine"):
        Lab(n=2, history=None, spares=False, start_timeout=120)
    new = [p for p in psutil.Process().children(recursive=True) if p.pid not in mine]
    assert [p.pid for p in new if not _gone(p)] == []
    assert glob.glob(str(tmp_path / "nbtools-lab-*")) == []


def test_close_stops_every_process_and_removes_the_folders():
    lab = Lab(n=2, history=None, spares=False)
    procs, workdir = _lab_pids(lab), lab.workdir
    assert len(procs) >= 4
    lab.close()
    assert [p.pid for p in procs if not _gone(p)] == []
    assert not workdir.exists()


# -- exposure --------------------------------------------------------------------------
def _sleep_step(ctx):
    import time
    time.sleep(1.5)


def test_no_lab_process_listens_beyond_loopback(lab):
    seen = []

    def scan():      # while the run is in flight: the store, gloo's pairs, ipyparallel
        time.sleep(0.5)
        for p in _lab_pids(lab):
            try:
                seen.extend((p.pid, c.laddr) for c in p.net_connections("inet")
                            if c.status == psutil.CONN_LISTEN)
            except psutil.Error:
                pass

    t = threading.Thread(target=scan)
    t.start()
    lab.run(_sleep_step, CUSTOM)
    t.join()
    assert seen, "no listening socket found: the scan saw nothing"
    import ipaddress
    outside = [(pid, a) for pid, a in seen if not ipaddress.ip_address(a.ip).is_loopback]
    assert outside == []
    store_port = int(lab.client[lab.rank_to_engine[0]].apply_sync(os.getenv, "MASTER_PORT"))
    assert store_port in {a.port for _, a in seen}     # the store was among them


# -- dead ranks ------------------------------------------------------------------------
def _exit_3(ctx):
    if ctx.rank == 1:
        os._exit(3)


def _sigkill(ctx):
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)


def _segfault(ctx):
    import ctypes
    if ctx.rank == 1:
        ctypes.string_at(0)


@pytest.mark.parametrize("step, how", [(_exit_3, "exit code 3"), (_sigkill, "killed by SIGKILL"),
                                       (_segfault, "killed by SIGSEGV")])
def test_dead_engine_is_named_with_its_exit_and_the_next_run_works(lab, step, how):
    old = lab.rank_to_engine[1]
    with pytest.raises(RunFailed) as e:
        lab.run(step, CUSTOM)
    assert f"rank 1's engine died: {how}" in str(e.value)
    assert e.value.run.status == "failed" and lab.history[-1] is e.value.run
    run = lab.run(StepConfig(**SMALL))           # no lab.restart()
    assert run.ok and sorted(run.summary["rank"]) == [0, 1]
    assert lab.rank_to_engine[1] != old          # a spare took rank 1


# -- ordinary failures -----------------------------------------------------------------
def _raise_on_1(ctx):
    if ctx.rank == 1:
        raise ValueError("planted")


def _hang_on_0(ctx):
    import time
    if ctx.rank == 0:
        time.sleep(3600)


def test_exception_then_next_run_ready(lab):
    with pytest.raises(RunFailed, match="planted"):
        lab.run(_raise_on_1, CUSTOM)
    engines = dict(lab.rank_to_engine)
    assert lab.run(StepConfig(**SMALL)).ok
    if lab.device_type == "cpu":                 # gloo: the group was re-created in place
        assert lab.rank_to_engine == engines
    else:                                        # NCCL: every rank got a warm spare
        assert set(lab.rank_to_engine.values()).isdisjoint(engines.values())


def test_hang_past_the_timeout_then_next_run_ready(lab):
    with pytest.raises(RunTimeout, match=r"rank\(s\) \[0\] did not finish"):
        lab.run(_hang_on_0, CUSTOM, timeout=3)
    hung = lab.rank_to_engine[0]
    assert lab.run(StepConfig(**SMALL)).ok
    assert lab.rank_to_engine[0] != hung


# -- Ctrl-C ----------------------------------------------------------------------------
def _long_step(ctx, marker_dir):
    import time
    open(os.path.join(marker_dir, f"started-{ctx.rank}"), "w").close()
    for _ in range(300):                # 30 s unless interrupted
        time.sleep(0.1)
    open(os.path.join(marker_dir, f"finished-{ctx.rank}"), "w").close()


def _ctrl_c_once_started(marker_dir, done, ranks=2):
    """Ctrl-C (SIGINT to this process) once every rank is inside the step: a fixed delay
    lands anywhere on a loaded box (before the run was sent, after it ended)."""
    import time
    while not done.is_set():
        if sum(f.startswith("started-") for f in os.listdir(marker_dir)) == ranks:
            os.kill(os.getpid(), signal.SIGINT)
            return
        time.sleep(0.05)


def test_ctrl_c_keeps_the_run_as_interrupted_and_nothing_queues(lab, tmp_path):
    marker_dir = str(tmp_path)

    def step(ctx):
        _long_step(ctx, marker_dir)

    n = len(lab.history)
    done = threading.Event()
    ctrl_c = threading.Thread(target=_ctrl_c_once_started, args=(marker_dir, done), daemon=True)
    ctrl_c.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            lab.run(step, CUSTOM)
    finally:
        done.set()          # a run that ended early must not leave a SIGINT for pytest
        ctrl_c.join()
    assert len(lab.history) == n + 1
    run = lab.history[-1]
    assert run.status == "interrupted"
    saved = {r.run_id: r.status for r in History.load(lab.history.folder)}
    assert saved[run.run_id] == "interrupted"
    nxt = lab.run(StepConfig(**SMALL))
    assert nxt.ok
    # had the abandoned step kept running, the next run would have queued behind it and
    # the step would have finished first
    assert [f for f in os.listdir(marker_dir) if f.startswith("finished-")] == []


# -- the first fault after Lab() (issue 26) -----------------------------------------------
def test_spares_started_with_the_ranks_are_warm_when_lab_returns(monkeypatch):
    """Where the host has room (or NBTOOLS_SPARES_WITH_RANKS=1), the spares start with the
    ranks and Lab() returns with every one registered and torch and torch.distributed
    imported (what joining needs; torch._dynamo goes on in the background), so a rank that
    dies in the very first run is swapped for a warm engine (no wait for one to start)."""
    from nbtools.engine import liveness
    monkeypatch.setenv("NBTOOLS_SPARES_WITH_RANKS", "1")
    with Lab(n=2, history=None, timeout=120, pg_timeout=60) as lab:
        assert lab.pool.early and sorted(lab.pool.spares) == [0, 1]
        for slot in lab.pool.spares.values():
            assert slot.engine_id is not None and slot.engine_id not in lab.rank_to_engine.values()
            assert lab.client[slot.engine_id].apply_sync(liveness.wait_joinable, 0)   # no waiting
        spare = lab.pool.spares[1].engine_id
        with pytest.raises(RunFailed, match="rank 1's engine died: killed by SIGKILL"):
            lab.run(_sigkill, CUSTOM)                # the first run after Lab()
        run = lab.run(StepConfig(**SMALL))
        assert run.ok
        assert lab.rank_to_engine[1] == spare        # the warm spare took rank 1
        # the rest of a spare's warm import (torch._dynamo) went on after Lab() returned,
        # and the run waited for it: none of it overlapped a step
        warm = lab.client[spare].apply_sync(liveness.warm_times)
        assert warm["the rest (dynamo, run modules)"] * 1e9 <= run.steps["ts_ns"].min()


def _sigkill_last(ctx):
    if ctx.rank == ctx.world_size - 1:
        os.kill(os.getpid(), signal.SIGKILL)


def test_without_room_for_spares_the_first_heal_starts_them(monkeypatch):
    """On a host without room for spares beside the ranks (2 ranks, 2 cores) Lab() and its
    first runs start none (two warm imports there made the first run 2.5x slower); a dead
    engine is replaced by a new one, and from that heal on each rank has a spare."""
    from nbtools.lab import pool
    monkeypatch.delenv("NBTOOLS_SPARES_WITH_RANKS", raising=False)
    monkeypatch.setattr(pool.os, "cpu_count", lambda: 2)
    with Lab(n=2, history=None, timeout=120, pg_timeout=60) as lab:
        assert lab.run(StepConfig(**SMALL)).ok
        assert lab.pool.on_fault and lab.pool.spares == {}
        assert len(lab.pool.slots) == 2                   # the ranks' engines, no other
        with pytest.raises(RunFailed, match="rank 1's engine died"):
            lab.run(_sigkill, CUSTOM)
        assert lab.run(StepConfig(**SMALL)).ok
        assert not lab.pool.on_fault and sorted(lab.pool.spares) == [0, 1]
        ranks = set(lab.rank_to_engine.values())
        assert all(s.engine_id not in ranks for s in lab.pool.spares.values())


def test_a_second_fault_right_after_a_heal_takes_the_second_spare(monkeypatch):
    """Where the host has room for two spares per rank (or NBTOOLS_SPARE_DEPTH=2), the
    second starts when Lab() returns and the first heal moves it up: a fault right after
    that heal is swapped for an engine started before the first fault, not for the one
    that heal has just started (issue 26: back-to-back faults waited ~10 s on H200)."""
    monkeypatch.setenv("NBTOOLS_SPARES_WITH_RANKS", "1")
    monkeypatch.setenv("NBTOOLS_SPARE_DEPTH", "2")
    with Lab(n=1, history=None, timeout=120, pg_timeout=60) as lab:   # 3 engines in all
        assert lab.pool.deep and sorted(lab.pool.reserve) == [0]
        first, second = lab.pool.spares[0], lab.pool.reserve[0]
        for _ in range(2):      # back to back: the second run starts with the first heal
            with pytest.raises(RunFailed, match="rank 0's engine died: killed by SIGKILL"):
                lab.run(_sigkill_last, CUSTOM)
        assert lab.run(StepConfig(**SMALL)).ok
        assert lab.rank_to_engine[0] == second.engine_id
        assert first.exit_status() is not None       # took rank 0 in between, then killed
        # both lines refilled by the heals, with engines started by them
        assert lab.pool.spares[0] not in (first, second) and lab.pool.reserve[0] not in (first, second)
