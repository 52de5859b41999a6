"""The lab's processes and temp folders never outlive the client that started them.

A small guard process (``python -m nbtools.lab.reaper``, its own session so a Ctrl-C or a
kill of the kernel's process group does not reach it) holds a pipe from the client. The
client tells it every process it starts (controller, engines) and every temp folder. When
the pipe closes without a goodbye, the client is gone (SIGKILL, OOM killer, a crashed
kernel): the guard kills every registered process with all its descendants and removes
the folders. A lab that closes normally asks it to do the same, so there is one cleanup.

Why a pipe and not a poll: end-of-file arrives the instant the kernel drops the client's
descriptors, and the guard needs no timer.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import psutil


def tree(pids) -> list:
    """The processes and all their descendants, snapshotted before anything is killed
    (a child whose parent died first is re-parented and could no longer be found)."""
    out, seen = [], set()
    for pid, created in pids:
        try:
            p = psutil.Process(pid)
            if created is not None and abs(p.create_time() - created) > 0.01:
                continue    # the pid was reused by someone else's process
            family = [p] + p.children(recursive=True)
        except psutil.Error:
            continue
        for q in family:
            if q.pid not in seen and q.pid != os.getpid():
                seen.add(q.pid)
                out.append(q)
    return out


def kill(pids, grace: float = 0.0) -> list:
    """SIGTERM (when ``grace`` > 0) then SIGKILL every process of the trees; returns the
    pids still running after 3 s (a killed process whose parent has not reaped it yet is
    a zombie: its memory is freed, it does not count)."""
    procs = tree(pids)
    if grace > 0:
        _send(procs, signal.SIGTERM)
        _until_gone(procs, grace)
    _send(procs, signal.SIGKILL)
    return [p.pid for p in _until_gone(procs, 3.0)]


def _send(procs, sig) -> None:
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.Error:
            pass


def _until_gone(procs, timeout: float) -> list:
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if _living(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [p for p in alive if _living(p)]
    return alive


def _living(p) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class Guard:
    """Client side: the pipe to the guard process."""

    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nbtools.lab.reaper"], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            close_fds=True, text=True)
        self.pids: list = []

    def watch(self, pid: int) -> None:
        """Have the reaper kill process ``pid`` if this one dies (its start time guards against
        a reused pid)."""
        try:
            created = psutil.Process(pid).create_time()
        except psutil.Error:
            return
        self.pids.append((pid, created))
        self._send(f"pid {pid} {created!r}")

    def folder(self, path) -> None:
        """Have the guard process remove folder ``path`` when the lab closes or this process
        dies, however it dies."""
        self._send(f"dir {path}")

    def close(self, timeout: float = 5.0) -> None:
        """Kill what is left of the lab and remove its folders, then let the guard go."""
        if self.proc.poll() is None:
            self._send("close")
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout)
            except (OSError, subprocess.TimeoutExpired):
                kill(self.pids)

    def _send(self, line: str) -> None:
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):
            pass


def main() -> None:
    """The guard process: collect pids and folders until the pipe closes, then clean up."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # Ctrl-C in a terminal is the client's
    pids, folders = [], []
    for line in sys.stdin:
        kind, _, rest = line.strip().partition(" ")
        if kind == "pid":
            pid, created = rest.split()
            pids.append((int(pid), float(created)))
        elif kind == "dir":
            folders.append(rest)
        elif kind == "close":
            break
    # the client closing its end normally sends "close" first; either way: clean up
    kill(pids)
    for folder in folders:
        for _ in range(3):    # a dying process can still write a log file into it
            shutil.rmtree(folder, ignore_errors=True)
            if not os.path.exists(folder):
                break
            time.sleep(0.2)


if __name__ == "__main__":
    main()
