"""The local ssh clients a lab's SSH launcher starts, each kept by PID so the lab ends its own.

ipyparallel's SSH launcher runs every remote step as a local ``ssh`` (check_output) and
keeps one ``ssh host python -c ssh_waitpid(...)`` per engine running for as long as the
engine lives. Those clients are not the lab's engines: stopping the engines does not end
a client whose host went away (an established connection to a vanished host never
closes), and nothing in ipyparallel ends them by itself. So every one goes through
``Sender``, which records its PID; ``end(prefix)`` kills the clients of the lab whose
folder is ``prefix``, by PID, and refuses to start new ones for it. Each runs in its own
session, like ipyparallel's local processes: a terminal's Ctrl-C reaches the lab, not the
clients it is waiting on.
"""
from __future__ import annotations

import subprocess
import threading
from typing import Callable

from ipyparallel.cluster.shellcmd import ShellCommandSend


class Ended(RuntimeError):
    """The lab that started this sender has stopped: no new ssh client for it."""


class Sender(ShellCommandSend):
    """ipyparallel's ssh command sender, keeping the ssh clients it starts so that they can
    all be ended with the lab."""
    def __init__(self, *args, **kwargs):
        self.procs: set = set()
        self.ended = False
        self._plock = threading.Lock()
        super().__init__(*args, **kwargs)

    def _check_output(self, cmd, **kwargs):
        data, timeout = kwargs.pop("input", None), kwargs.pop("timeout", None)
        kwargs.setdefault("text", True)
        with self._plock:
            if self.ended:
                raise Ended(f"the lab has stopped; not running {cmd[:1]} again")
            p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 start_new_session=True, **kwargs)
            self.procs.add(p)
        try:
            out, _ = p.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise
        finally:
            with self._plock:
                self.procs.discard(p)
        if p.returncode:
            if self.ended:
                raise Ended("the lab has stopped; its ssh client was ended")
            raise subprocess.CalledProcessError(p.returncode, cmd, out)
        return out

    def _runs_successful(self, cmd):
        try:
            self._check_output(cmd, input="")
        except subprocess.CalledProcessError:
            return False
        return True

    def end(self) -> list:
        """Kill this sender's running clients (by PID, each a child of this process not yet
        reaped, so the PID is still its own); none start after. Their PIDs."""
        with self._plock:
            self.ended = True
            procs = list(self.procs)
        for p in procs:
            try:
                p.kill()
            except OSError:
                pass
        return [p.pid for p in procs]


_SENDERS: dict = {}     # (ssh command, args, location, python, lab folder) -> Sender
_LOCK = threading.Lock()


def sender(key: tuple, make: Callable[[], Sender]) -> Sender:
    """One sender per host per lab (key's last item: the lab's local profile folder): it
    already knows the host's shell, and its clients are that lab's alone."""
    with _LOCK:
        if key not in _SENDERS:
            _SENDERS[key] = make()
        return _SENDERS[key]


def end(prefix: str) -> list:
    """End the ssh clients of every sender whose lab folder starts with ``prefix``; a lab
    started again there gets new senders. The PIDs killed."""
    with _LOCK:
        keys = [k for k in _SENDERS if _under(k, prefix)]
        senders = [_SENDERS.pop(k) for k in keys]
    return [pid for s in senders for pid in s.end()]


def running(prefix: str) -> list:
    """PIDs of the ssh clients the senders of labs under ``prefix`` are running now."""
    with _LOCK:
        senders = [s for k, s in _SENDERS.items() if _under(k, prefix)]
    out = []
    for s in senders:
        with s._plock:
            out += [p.pid for p in s.procs]
    return out


def _under(key: tuple, prefix: str) -> bool:
    return str(key[-1]).startswith(prefix.rstrip("/") + "/")
