"""ipyparallel's local engine launcher, keeping the engine's exit status.

ipyparallel reaps a local engine with psutil in a waiter thread and hands the exit code
only to its event loop (which a synchronous client may not be running), and its Popen then
reads 0 for any death. The lab needs the real code or signal, at once, to say how a rank
died ("killed by SIGKILL"), so the waiter's process handle records it.
"""
from __future__ import annotations

import psutil
from ipyparallel.cluster.launcher import LocalEngineLauncher, LocalEngineSetLauncher


class _Recording(psutil.Process):
    exit_code = None
    exited = False

    def wait(self, timeout=None):
        code = super().wait(timeout)
        self.exit_code, self.exited = code, True
        return code


class EngineLauncher(LocalEngineLauncher):
    def _start_waiting(self):
        self.process = _Recording(self.process.pid)   # before the waiter thread starts
        super()._start_waiting()


class EngineSetLauncher(LocalEngineSetLauncher):
    launcher_class = EngineLauncher
