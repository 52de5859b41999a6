"""The lab's local ssh clients (lab/sshclients.py): kept by PID, ended with their lab, none
started after; run with a local command in place of ssh (the same Popen path)."""
import os
import subprocess
import threading
import time

import psutil
import pytest

from nbtools.lab import sshclients


def _sender():
    return sshclients.Sender(["sh"], ["-c"], "python3", initialize=False)


def test_end_kills_the_labs_running_clients_and_starts_no_more(tmp_path):
    s = sshclients.sender(("sleep", str(tmp_path / "lab" / "ipython")), _sender)
    other = sshclients.sender(("sleep", str(tmp_path / "lab2" / "ipython")), _sender)
    errors = []

    def wait(sender):
        try:
            sender._check_output(["sleep", "60"])
        except Exception as e:
            errors.append(type(e).__name__)

    threads = [threading.Thread(target=wait, args=(x,)) for x in (s, s, other)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while len(sshclients.running(str(tmp_path / "lab"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = sshclients.running(str(tmp_path / "lab"))
    assert len(pids) == 2
    other_pid = sshclients.running(str(tmp_path / "lab2"))
    assert len(other_pid) == 1
    # the clients sit in their own session: a terminal's Ctrl-C does not reach them
    assert all(os.getsid(p) == p for p in pids)
    assert sorted(sshclients.end(str(tmp_path / "lab"))) == sorted(pids)
    for t in threads[:2]:
        t.join(10)
    assert errors == ["Ended", "Ended"]
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                   for p in pids)
    with pytest.raises(sshclients.Ended):
        s._check_output(["true"])
    assert psutil.pid_exists(other_pid[0])         # another lab's client is left alone
    sshclients.end(str(tmp_path / "lab2"))
    threads[2].join(10)
    assert sshclients.running(str(tmp_path)) == []


def test_a_failing_client_is_a_called_process_error_with_its_output():
    with pytest.raises(subprocess.CalledProcessError) as e:
        _sender()._check_output(["sh", "-c", "echo out; exit 3"], input="")
    assert e.value.returncode == 3 and e.value.output == "out\n"
    assert _sender()._check_output(["cat"], input="hi") == "hi"
