"""Issue 44, "Done when" 1: Ctrl-C, once or twice, at any point of a run or of its save,
keeps every finished run on disk and leaves the lab ready. Real SIGINTs to this process
(the lab's client, as a terminal's or a kernel's Ctrl-C is), sent at the moment the code
reaches a chosen step: an audit hook (sys.addaudithook) sees the save make its folder,
open run.json, rename the folder into place, or the lab signal its engines, and sends the
SIGINT from there; nothing in the code under test is replaced.

Seen before: a Ctrl-C during the save left the run ``ok`` in lab.history but missing on
disk, and lab.run raised a bare KeyboardInterrupt(); a second Ctrl-C while the engines were
being stopped lost the run, and the next run failed with "process group is broken"."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from nbtools import StepConfig
from nbtools.common.atomic import PARTIAL_SUFFIX
from nbtools.results.history import History

from support.lab_steps import SMALL

pytestmark = pytest.mark.slow

LAB = dict(timeout=120, pg_timeout=60)
CUSTOM = StepConfig(scenario="custom", warmup=0, steps=1, profiled=0)


class _Trigger:
    """SIGINT to this process when an audited event matches: each (event, test) in
    ``points`` fires once, in order. Off (no points) between tests."""

    def __init__(self):
        self.points, self.fired = [], []

    def __call__(self, event, args):
        if not self.points:
            return
        name, test = self.points[0]
        if event == name and test(args):
            self.points.pop(0)
            self.fired.append(name)
            os.kill(os.getpid(), signal.SIGINT)


TRIGGER = _Trigger()


@pytest.fixture(scope="module", autouse=True)
def _audit():
    # an audit hook cannot be removed: it stays, doing nothing once TRIGGER has no points
    if not getattr(sys, "_nbtools_test_trigger", False):
        sys.addaudithook(lambda event, args: TRIGGER(event, args))
        sys._nbtools_test_trigger = True
    yield
    TRIGGER.points = []


@pytest.fixture
def at():
    """``at((event, test), ...)``: the SIGINTs of one test; none may be left for pytest."""
    def arm(*points):
        TRIGGER.points, TRIGGER.fired = list(points), []
    yield arm
    left = list(TRIGGER.points)
    TRIGGER.points = []
    assert not left, f"these Ctrl-Cs were never sent: {left}"


def _in_partial(args, name=None) -> bool:
    p = str(args[0]) if args else ""
    parent, base = os.path.split(p)
    if name is None:                  # the folder itself
        return base.endswith(PARTIAL_SUFFIX)
    return base == name and parent.endswith(PARTIAL_SUFFIX)


MAKES_FOLDER = ("os.mkdir", lambda a: _in_partial(a))
OPENS_RUN_JSON = ("open", lambda a: _in_partial(a, "run.json"))
RENAMES_INTO_PLACE = ("os.rename", lambda a: str(a[0]).endswith(PARTIAL_SUFFIX))


def _check_on_disk(lab, run) -> None:
    """The run is saved whole, as it is in memory; no half-saved folder anywhere."""
    folder = lab.history.folder
    saved = History.load(folder)
    assert {r.run_id: r.status for r in saved}[run.run_id] == run.status
    assert saved.damaged == [], saved.damaged
    left = [p for p in os.listdir(folder) if p.endswith(PARTIAL_SUFFIX) or
            (p[:4].isdigit() and not os.path.exists(os.path.join(folder, p, "run.json")))]
    assert left == []
    assert run.folder is not None and (run.folder / "run.json").is_file()


@pytest.mark.parametrize("point", [MAKES_FOLDER, OPENS_RUN_JSON, RENAMES_INTO_PLACE],
                         ids=["save-starts", "run-json", "rename-into-place"])
def test_ctrl_c_during_the_save_keeps_the_finished_run_and_says_so(lab, at, point):
    n = len(lab.history)
    at(point)
    with pytest.raises(KeyboardInterrupt) as e:
        lab.run(StepConfig(**SMALL))
    run = e.value.run           # the run rides on the interrupt, as RunFailed's does
    assert run.ok and lab.history[-1] is run and len(lab.history) == n + 1
    said = str(e.value)
    assert f"run {run.run_id}" in said and str(run.folder) in said and "ready" in said, said
    _check_on_disk(lab, run)
    assert lab.run(StepConfig(**SMALL)).ok


def test_two_ctrl_c_during_the_save_keep_it_and_the_next_run_works(lab, at):
    at(MAKES_FOLDER, RENAMES_INTO_PLACE)
    with pytest.raises(KeyboardInterrupt) as e:
        lab.run(StepConfig(**SMALL))
    assert TRIGGER.fired == [MAKES_FOLDER[0], RENAMES_INTO_PLACE[0]]
    _check_on_disk(lab, e.value.run)
    assert lab.run(StepConfig(**SMALL)).ok


def _stubborn_step(ctx, marker_dir):
    """A step that swallows Ctrl-C (as a loop with a broad except does) and runs on: its
    engine does not come back within the lab's grace."""
    import time as t
    open(os.path.join(marker_dir, f"started-{ctx.rank}"), "w").close()
    end = t.monotonic() + 60
    while t.monotonic() < end:
        try:
            t.sleep(0.05)
        except KeyboardInterrupt:
            pass


def _ctrl_c_once_started(marker_dir, done, ranks=2):
    """The first Ctrl-C once every rank is inside the step."""
    while not done.is_set():
        if sum(f.startswith("started-") for f in os.listdir(marker_dir)) == ranks:
            os.kill(os.getpid(), signal.SIGINT)
            return
        time.sleep(0.05)


def test_second_ctrl_c_while_the_engines_stop_keeps_the_run_and_the_lab_recovers(
        lab, at, tmp_path):
    """First Ctrl-C once both ranks are in the step; the second as the lab signals the
    engines (os.kill of an engine with SIGINT): it cuts the wait short, the run is kept as
    'interrupted' and saved, the stubborn engines are swapped before the next run. A Ctrl-C
    during that swap waits for it; the run after that works."""
    marker = str(tmp_path)

    def step(ctx):
        _stubborn_step(ctx, marker)

    engine_pids = {lab.pool.by_engine(e).pid for e in lab.rank_to_engine.values()}
    at(("os.kill", lambda a: a[0] in engine_pids and a[1] == signal.SIGINT))
    engines = dict(lab.rank_to_engine)
    done = threading.Event()
    first = threading.Thread(target=_ctrl_c_once_started, args=(marker, done), daemon=True)
    first.start()
    try:
        with pytest.raises(KeyboardInterrupt) as e:
            lab.run(step, CUSTOM)
    finally:
        done.set()
        first.join()
    run = e.value.run
    assert run.status == "interrupted" and lab.history[-1] is run
    assert "interrupted (Ctrl-C)" in str(e.value) and "fresh engines" in str(e.value)
    _check_on_disk(lab, run)
    # the repair before the next run starts spare engines: a Ctrl-C there waits for it
    at(("subprocess.Popen", lambda a: True))
    with pytest.raises(KeyboardInterrupt, match="repaired.*ready; the run did not start"):
        lab.run(StepConfig(**SMALL))
    nxt = lab.run(StepConfig(**SMALL), timeout=60)
    assert nxt.ok and set(lab.rank_to_engine.values()).isdisjoint(engines.values())
    _check_on_disk(lab, nxt)


CLI_CTRL_C = """
import os, signal, sys
from nbtools.cli.main import main
from nbtools.common.atomic import PARTIAL_SUFFIX

def hook(event, args):       # Ctrl-C as the run's folder is renamed into place
    if event == "os.rename" and str(args[0]).endswith(PARTIAL_SUFFIX):
        os.kill(os.getpid(), signal.SIGINT)
sys.addaudithook(hook)
sys.exit(main(sys.argv[1:]))
"""


def test_cli_ctrl_c_is_one_line_saying_what_was_kept(tmp_path):
    h = tmp_path / "runs"
    r = subprocess.run([sys.executable, "-c", CLI_CTRL_C, "run", "--steps", "1",
                        "--profiled", "0", "--warmup", "0", "--history", str(h), "--quiet"],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 130, r.stderr
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    saved = History.load(h)
    assert len(saved) == 1 and saved[0].ok and not saved.damaged
    assert last.startswith("nbtools run: interrupted (Ctrl-C)") and saved[0].run_id in last
