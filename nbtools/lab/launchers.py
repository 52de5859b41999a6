"""ipyparallel's engine launchers as the lab needs them: the local one keeping the engine's
exit status, the SSH one stopping cleanly when an engine is already gone.

ipyparallel reaps a local engine with psutil in a waiter thread and hands the exit code
only to its event loop (which a synchronous client may not be running), and its Popen then
reads 0 for any death. The lab needs the real code or signal, at once, to say how a rank
died ("killed by SIGKILL"), so the waiter's process handle records it.
"""
from __future__ import annotations

import os
import sys
import threading
import uuid
from pathlib import Path

import psutil
from ipyparallel.cluster import launcher as _ipp_launcher
from ipyparallel.cluster.launcher import LocalEngineLauncher, LocalEngineSetLauncher

from nbtools.lab import sshclients


class _Recording(psutil.Process):
    exit_code = None
    exited = False

    def wait(self, timeout=None):
        code = super().wait(timeout)
        self.exit_code, self.exited = code, True
        return code


class EngineLauncher(LocalEngineLauncher):
    """ipyparallel's local engine launcher, with the engine's pid recorded before its waiter
    thread starts, so the reaper always knows it."""
    def _start_waiting(self):
        self.process = _Recording(self.process.pid)   # before the waiter thread starts
        super()._start_waiting()


class EngineSetLauncher(LocalEngineSetLauncher):
    """A set of EngineLaunchers (the lab's local engines)."""
    launcher_class = EngineLauncher


# (location, profile folder) already created
_PROFILES: set = set()
_LOCK = threading.Lock()


class SSHEngineLauncher(_ipp_launcher.SSHEngineLauncher):
    """ipyparallel's SSH engine launcher, with the host's checks done once per host.

    ipyparallel asks each new engine's host for its shell, its python and a profile folder
    (three ssh logins, ~1 s each on a loaded machine, one remote IPython import) before
    the one login that starts it. Per host these answers do not change, so a lab of 8
    engines per host (or a heal) pays them once. The connection info reaches the engine
    in its environment ($IPP_CONNECTION_INFO, sent over ssh's stdin, never argv), so no
    connection file needs copying."""

    remote_exited = False       # set by its waiter when the engine's process is gone

    @property
    def ssh_sender(self):
        """The one ssh command sender for this host and profile, kept on the launcher."""
        # kept on the launcher: once its lab has ended the sender, a late call must not
        # make a fresh one (and start ssh clients nobody would end)
        if self._ssh_sender is None:
            key = (tuple(self.ssh_cmd), tuple(self.ssh_args), self.location,
                   self.remote_python, self.profile_dir)
            self._ssh_sender = sshclients.sender(key, lambda: sshclients.Sender(
                self.ssh_cmd, self.ssh_args + [self.location], self.remote_python,
                log=self.log))
        return self._ssh_sender

    def _wait(self):
        """ipyparallel's waiter (one ssh_waitpid client at a time), quiet once the lab
        stopped waiting or ended its ssh clients: a client it killed is no engine's exit."""
        exit_code = None
        while not self._stop_waiting.is_set() and self.state == "running":
            try:
                exit_code = self.wait_one(timeout=self.poll_seconds)
            except TimeoutError:
                continue
            except Exception:
                if self._stop_waiting.is_set() or self.ssh_sender.ended:
                    return
                raise
            break
        if self._stop_waiting.is_set():
            return
        # read by the lab's start loop at once: the callback below runs only on a loop that
        # runs, and an engine that exits before its startup command has no lifeline to drop
        self.remote_exited = True
        stop_data = dict(exit_code=exit_code, pid=self.pid, identifier=self.identifier)
        self.loop.add_callback(lambda: self.notify_stop(stop_data))

    def start(self, hostname=None, user=None, port=None):
        """Start the engine on its host: create the remote profile once per host and folder, send
        the connection files, then start it through the shared ssh sender."""
        if hostname is not None:
            self.hostname = hostname
        if user is not None:
            self.user = user
        if port is not None and "-p" not in self.ssh_args:
            self.ssh_args += ["-p", str(port)]
        sender = self.ssh_sender
        with _LOCK:
            if not sender.shell_info:
                sender.get_shell_info()
                sender.has_python()
            if (self.location, self.remote_profile_dir) not in _PROFILES:
                sender.check_output_python_module(
                    ["IPython", "profile", "create", "--profile-dir", self.remote_profile_dir])
                _PROFILES.add((self.location, self.remote_profile_dir))
        self.send_files()
        self.pid = sender.cmd_start(self.program + self.program_args, env=self.get_env(),
                                    output_file=self.remote_output_file)
        self.notify_start({"host": self.location, "pid": self.pid})
        self._start_waiting()
        self.fetch_files()

    def signal(self, sig):
        """ipyparallel signals the recorded remote pid over ssh and raises there when the
        process is already gone (ProcessLookupError in its remote helper): gone is what a
        stop wanted."""
        try:
            super().signal(sig)
        except Exception:
            pass


class SSHEngineSetLauncher(_ipp_launcher.SSHEngineSetLauncher):
    """A set of SSHEngineLaunchers (a lab's engines on other hosts)."""
    launcher_class = SSHEngineLauncher


def output_tail(launcher, chars: int = 400) -> str:
    """The end of what an engine printed (its launcher's output file, fetched from its host
    for an ssh one), for an error that names it; "no output" when there is none to read."""
    try:
        out = launcher.get_output() or ""
    except Exception:
        out = ""
    return out.strip()[-chars:] or "no output"


def forget_profiles(prefix: str) -> None:
    """The lab's per-host folders go with its engines: a restarted lab creates them again."""
    with _LOCK:
        for key in [k for k in _PROFILES if k[1].startswith(prefix)]:
            _PROFILES.discard(key)


# The hub finds a new engine's heart only at its next beat after the engine's first pong,
# and registration waits for that: up to two periods (ipyparallel's 3 s made each engine's
# registration 3-6 s of an 8-s Lab() target, issue 26). Pings every 0.25 s; the misses
# allowed before an engine counts as gone stay 30 s, as with the default 10 x 3 s.
HEARTBEAT = ["--HeartMonitor.period=250", "--HeartMonitor.max_heartmonitor_misses=120"]


def start_controller(ipp, engines, workdir: Path, guard, **cluster_kw):
    """A cluster with no engines yet and its controller started under the lab's liveness
    watchdog (it ends when the client's pid does); the guard watches it too. The one place
    a lab makes its controller, on one host or several (``controller_ip=`` there)."""
    # shutdown_atexit off: the lab's guard ends its processes and folders when this process
    # goes (lab/reaper.py); ipyparallel's own exit hook, stopping the same cluster again,
    # printed "Stopping cluster ..." into the script's stderr (and a kernel's: JupyterLab's
    # Log Console), and raced the guard for the controller's log ("Failed to remove ...")
    cluster = ipp.Cluster(n=0, engines=engines, log_level=40, shutdown_atexit=False,
                          cluster_id=f"nbtools-{uuid.uuid4().hex[:6]}",
                          profile_dir=str(workdir / "ipython"),
                          controller_args=HEARTBEAT + cluster_kw.pop("controller_args", []),
                          **cluster_kw)
    cluster.start_controller_sync(
        controller_cmd=[sys.executable, "-m", "nbtools.engine.liveness"],
        environment={"NBTOOLS_CLIENT_PID": str(os.getpid()), "NBTOOLS_WARM": "0"})
    guard.watch(cluster.controller.pid)
    return cluster
