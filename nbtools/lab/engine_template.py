"""lab: the client's side of the engine template (engine/template.py): one warm process per
client and environment that the local CPU engines of this process's second and later Labs
are forked from.

A forked engine skips its imports (about 4.6 s of CPU each on a 2-core box; 0.03 s forked:
docs/benchmarks.md "Session 17"), which is most of what a second Lab(), a spare or a heal's
new engine cost. A process's first Lab() starts its engines as new interpreters and starts
no template: most processes (a CLI run, a notebook run once) start one lab, and a template
there is an extra import of everything (session 17 measured the whole suite slower with a
template in every process). At the second Lab() the template starts, and its engines wait
for its imports (about as long as their own would take) before they are forked.

The template lives as long as this process (it ends when our end of its stdin closes) and
serves every lab started here with the same environment: a person who changes an
environment variable before the next Lab() (TORCH_CPP_LOG_LEVEL, say, which torch reads at
import) gets a new template; the old one ends once none of its engines is left. Variables
that change on their own (pytest's PYTEST_CURRENT_TEST, per test) do not count: a template
per test was session 17's other cost.

Only the template can reap its children, so it reports each engine's exit code, and
``Forked.wait`` gives it to the launcher's waiter as a child's would be (lab/launchers.py).
GPU engines and ``NBTOOLS_FORK_ENGINES=0`` keep one new interpreter per engine.
"""
from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import psutil

START_S = 120.0       # the first fork waits for the template's imports (torch: seconds)
# per engine, set by the Pool: not part of what the template's own imports depend on
PER_ENGINE = ("NBTOOLS_LOCAL_RANK", "NBTOOLS_SLOT", "NBTOOLS_CONNECTION_FILE",
              "IPP_CONNECTION_INFO", "JPY_SESSION_NAME")
# set by others while this process runs, read by nothing an engine imports: not a new template
VOLATILE = ("PYTEST_CURRENT_TEST",)
_LABS = 0     # Labs that asked for local engines in this process (lab_started)


def wanted() -> bool:
    """Whether local CPU engines are forked from a template (``NBTOOLS_FORK_ENGINES=0``: no)."""
    return os.environ.get("NBTOOLS_FORK_ENGINES", "1") != "0" and hasattr(os, "fork")


class Forked(psutil.Process):
    """An engine forked by the template: its exit code comes from the template's report."""

    exit_code = None
    exited = False

    def __init__(self, pid: int, template: "Template"):
        super().__init__(pid)
        self.template, self.done = template, threading.Event()

    def wait(self, timeout=None):
        """The exit code once the template reported it (-N: killed by signal N); if the
        template itself is gone, whenever the process is (the code is then unknown)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done.is_set():
            if self.template.dead:
                code = super().wait(None if deadline is None
                                    else max(0.0, deadline - time.monotonic()))
                self.exit_code, self.exited = code, True
                return code
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise psutil.TimeoutExpired(timeout, self.pid)
            self.done.wait(0.2 if left is None else min(0.2, left))
        self.exited = True
        return self.exit_code


class Template:
    """One template process and the engines it forked for us."""

    def __init__(self, env: dict):
        self.env, self.dead, self.ready = env, False, threading.Event()
        self.lock, self.replies, self.kids = threading.Lock(), {}, {}
        self.next_id = 0
        log = tempfile.NamedTemporaryFile("w", prefix="nbtools-template-", suffix=".log",
                                          delete=False)
        self.log_path = log.name
        self.proc = subprocess.Popen([sys.executable, "-m", "nbtools.engine.template"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log, env=env, start_new_session=True)
        log.close()
        threading.Thread(target=self._read, name="nbtools-template", daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            msg = json.loads(line)
            if msg.get("ready"):
                self.ready.set()
                continue
            with self.lock:
                if "exit" in msg:
                    kid = self.kids.pop(msg["exit"], None)
                    if kid is not None:
                        kid.exit_code = msg["code"]
                        kid.done.set()
                else:
                    slot = self.replies.get(msg["id"])
                    if slot is not None:
                        slot.append(msg)
                        slot[0].set()
        with self.lock:
            self.dead = True
            self.ready.set()
            for slot in self.replies.values():
                slot[0].set()

    def fork(self, args: list, env: dict, cwd: str, out: str) -> Forked:
        """An engine process for ``args`` (boot's arguments), forked by the template once
        it has imported everything."""
        if not self.ready.wait(START_S):
            raise RuntimeError(f"the engine template was not ready in {START_S:.0f} s; its "
                               f"log: {self.tail()}")
        with self.lock:
            if self.dead:
                raise RuntimeError("the engine template has ended")
            k, self.next_id = self.next_id, self.next_id + 1
            slot = self.replies[k] = [threading.Event()]
            self.proc.stdin.write(json.dumps(dict(id=k, args=args, env=env, cwd=cwd,
                                                  out=out)).encode() + b"\n")
            self.proc.stdin.flush()
        got = slot[0].wait(START_S)
        with self.lock:
            self.replies.pop(k, None)
            if not got or len(slot) < 2 or "pid" not in slot[1]:
                why = slot[1].get("error") if len(slot) > 1 else (
                    "it ended" if self.dead else f"no answer in {START_S:.0f} s")
                raise RuntimeError(f"the engine template did not fork an engine: {why}; "
                                   f"its log: {self.tail()}")
            kid = Forked(slot[1]["pid"], self)
            self.kids[kid.pid] = kid
            return kid

    def tail(self, chars: int = 400) -> str:
        """The end of what the template printed (its import errors), for an error message."""
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-chars:].strip() or "empty"
        except OSError:
            return "unreadable"

    def close(self) -> None:
        """End the template (its engines go on: each belongs to its lab)."""
        self.dead = True
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


_LOCK = threading.Lock()
_TEMPLATES: dict = {}     # environment (sorted items) -> Template


def template_env(extra: dict) -> dict:
    """The template's environment: ours with the lab's engine-wide settings, without the
    per-engine and volatile ones."""
    skip = PER_ENGINE + VOLATILE
    env = {k: v for k, v in os.environ.items() if k not in skip}
    env.update({k: v for k, v in extra.items() if k not in skip})
    return env


def lab_started() -> None:
    """Count a Lab that starts local engines here (lab/pool.py): from the second on, its
    engines are forked."""
    global _LABS
    with _LOCK:
        _LABS += 1


def template(extra: dict) -> Template | None:
    """This process's template for engines with ``extra`` in their environment, started if
    there is none for it; None during this process's first Lab (its engines start as new
    interpreters). Templates for other environments end once none of their engines is
    left (only a template can report how its engines ended)."""
    env = template_env(extra)
    key = tuple(sorted(env.items()))
    with _LOCK:
        if _LABS < 2:
            return None
        t = _TEMPLATES.get(key)
        if t is None or t.dead:
            t = _TEMPLATES[key] = Template(env)
        for k, other in list(_TEMPLATES.items()):
            if other is not t and (other.dead or not other.kids):
                other.close()
                del _TEMPLATES[k]
        return t


def pids() -> set:
    """The pids of this process's live templates (tests leave them out of the processes a
    lab must not leave behind)."""
    with _LOCK:
        return {t.proc.pid for t in _TEMPLATES.values() if not t.dead}


@atexit.register
def _end() -> None:
    with _LOCK:
        for t in _TEMPLATES.values():
            t.close()
        _TEMPLATES.clear()
