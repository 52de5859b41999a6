"""A script's console, byte for byte (issue 44): ``Lab(echo=False)`` prints nothing but what
the script prints (a 12-run lab.ab printed about 60 progress lines on stderr, a panel button
clicked from a script wrote "\\x1b[2K\\r" to stdout); with echo on, progress is one line
rewritten in place on a terminal and nothing when stderr is redirected, and the engines'
library log lines are folded to one line per kind per lab. Real scripts in subprocesses,
with pipes and with a real terminal (a pty)."""
from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.paths import ROOT

# c10's INFO lines on every DDP build (what notebook 05 turns on): library log lines to fold
LOUD_TORCH = dict(TORCH_DISTRIBUTED_DEBUG="INFO", TORCH_CPP_LOG_LEVEL="INFO")


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
        **extra)
    env.pop("NBTOOLS_WARNINGS", None)
    # a person's script, not a test: ipykernel (the engines) reads no fd-level output (c10's
    # log lines) where PYTEST_CURRENT_TEST is set
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


def _script(tmp_path: Path, code: str) -> Path:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(code))
    return path


def run_piped(script: Path, **env) -> tuple[bytes, bytes]:
    """(stdout, stderr) of the script with both redirected (a CI log, `> out 2> err`)."""
    r = subprocess.run([sys.executable, str(script)], cwd=script.parent, env=_env(**env),
                       capture_output=True, timeout=600)
    assert r.returncode == 0, (r.stdout[-2000:] + r.stderr[-4000:]).decode(errors="replace")
    return r.stdout, r.stderr


def run_in_terminal(script: Path, **env) -> bytes:
    """Everything the script wrote to a real terminal (stdout and stderr are the pty)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, str(script)], cwd=script.parent,
                            env=_env(TERM="xterm", COLUMNS="200", **env),
                            stdin=follower, stdout=follower, stderr=follower, close_fds=True)
    os.close(follower)
    out = bytearray()
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:           # EIO: the script ended and closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert proc.wait(600) == 0, out[-4000:].decode(errors="replace")
    return bytes(out)


def on_screen(raw: bytes) -> list[str]:
    """The lines a person reads on the terminal afterwards: each "\\r" (with or without
    erase-line) starts the line again, so only what was written after the last one stays."""
    text = raw.decode().replace("\r\n", "\n")
    lines = []
    for line in text.split("\n"):
        line = line.split("\r")[-1].replace("\x1b[2K", "")
        if line:
            lines.append(line)
    return lines


# the lab is left open, as a script may: its end is the lab's end ("Stopping cluster <...>"
# on stderr was ipyparallel's exit hook stopping it a second time)
QUIET = """
    from nbtools import Lab, StepConfig
    lab = Lab(echo=False, history=None)
    a = StepConfig(scenario="ddp-train", warmup=1, steps=2, profiled=1)
    cmp = lab.ab(a, a.replace(batch=16), rounds=3)
    print("runs", len(cmp.runs_a) + len(cmp.runs_b))
    p = lab.panel(a).panel
    p.run_button.click()
    print("panel", p.status.value.startswith("run #"), p.error.value == "")
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_quiet_lab_prints_only_what_the_script_prints(tmp_path):
    script = _script(tmp_path, QUIET)
    out, err = run_piped(script, **LOUD_TORCH)
    assert out == b"runs 12\npanel True True\n", out
    assert err == b"", err.decode()[:3000]
    # the same on a terminal: not a byte of progress, no escape sequence
    assert run_in_terminal(script, **LOUD_TORCH) == b"runs 12\r\npanel True True\r\n"


LOUD = """
    from nbtools import Lab, StepConfig
    with Lab(history=None) as lab:
        a = StepConfig(scenario="ddp-train", warmup=1, steps=2, profiled=1)
        cmp = lab.ab(a, a.replace(batch=16), rounds=2)
        print("runs", len(cmp.runs_a) + len(cmp.runs_b))
        print("kinds", len(lab.engine_log))
"""
_PROGRESS = re.compile(r"run [0-9a-f]{8}: ")
_RESULT = re.compile(r"^[AB] ddp-train .* round [12]/2: ok, .* ms/step \(\d+\.\d s\)$")


def _said_once_per_kind(lines: list) -> None:
    """The library lines: one line per kind, each once in the whole script, the note
    saying where the rest are; no raw log line or the lines of its list."""
    folded = [ln for ln in lines if ln.startswith("[rank 0, 1] ")]
    kinds = [re.sub(r"^\[rank 0, 1\] \d+ x ", "", ln) for ln in folded]
    assert any("DDP Initialized with:" in k for k in kinds), lines
    assert len(kinds) == len(set(kinds)), folded
    assert not any(re.match(r"^\[rank \d\] \[rank\d\]:\[I", ln) for ln in lines), lines
    assert not any("broadcast_buffers" in ln for ln in lines), lines
    notes = [ln for ln in lines if "lab.engine_log" in ln]
    assert len(notes) == 1, lines


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_progress_is_one_line_in_place_on_a_terminal_and_none_in_a_log(tmp_path):
    script = _script(tmp_path, LOUD)
    out, err = run_piped(script, **LOUD_TORCH)
    lines = out.decode().splitlines()
    assert [ln for ln in lines if _RESULT.match(ln)] == lines[:8], lines
    assert lines[8] == "runs 8" and re.fullmatch(r"kinds \d+", lines[9]), lines
    # redirected: no progress at all, no escape sequence; the library lines folded
    assert not _PROGRESS.search(err.decode()) and b"\x1b" not in err, err.decode()[:3000]
    _said_once_per_kind(err.decode().splitlines())

    raw = run_in_terminal(script, **LOUD_TORCH)
    text = raw.decode()
    # the progress was there, rewritten in place, never a line of its own
    assert "\r\x1b[2Krun " in text, text[:3000]
    assert not re.search(r"run [0-9a-f]{8}: [^\r]*\n", text), text[:3000]
    screen = on_screen(raw)
    assert not any(_PROGRESS.search(ln) for ln in screen), screen
    assert sum(bool(_RESULT.match(ln)) for ln in screen) == 8, screen
    assert screen[-2] == "runs 8", screen
    _said_once_per_kind(screen)


def _drive_view(stream_is_terminal: bool) -> bytes:
    """progress_view.View on this process's stderr, fed phases as Lab.run feeds them."""
    code = textwrap.dedent("""
        from nbtools.lab.progress_view import View
        v = View([0, 1], "abcd1234")
        for st in ({"phase": "start"}, {"phase": "warm-up/compile", "step": 1, "of": 3},
                   {"phase": "measured", "step": 1, "of": 2}, {"phase": "done"}):
            v.update({0: st, 1: st})
        v.close("done")
        print("after")
    """)
    if stream_is_terminal:
        path = Path(os.environ.get("TMPDIR", "/tmp")) / f"nbtools-view-{os.getpid()}.py"
        path.write_text(code)
        try:
            return run_in_terminal(path)
        finally:
            path.unlink()
    r = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout + b"|" + r.stderr


def test_a_runs_progress_is_rewritten_in_place_then_wiped():
    raw = _drive_view(stream_is_terminal=True)
    text = raw.decode()
    steps = [s.split(" ·")[0] for s in text.split("\r\x1b[2K")[1:] if s.startswith("run ")]
    assert steps == ["run abcd1234: start", "run abcd1234: warm-up/compile",
                     "run abcd1234: measured", "run abcd1234: done"], text
    assert "\n" not in text[:text.index("after")], text        # no line of its own
    assert on_screen(raw) == ["after"], text


def test_redirected_progress_writes_nothing():
    assert _drive_view(stream_is_terminal=False) == b"after\n|"


class _FakeLab:
    """What LiveLine reads of a lab: its progress setting and whether it echoes."""

    def __init__(self, echo: bool):
        self.progress, self.echo = True, echo


def test_explores_line_is_silent_for_a_quiet_lab_and_in_a_log(capsys):
    """lab.explore's line (lab/live_line.py): nothing at all from Lab(echo=False); with
    stderr not a terminal, the finished steps on stdout and no progress."""
    from nbtools.lab.live_line import LiveLine
    for echo, out in ((False, ""), (True, "explore 1: compile=default: B is faster\n")):
        lab = _FakeLab(echo)
        with LiveLine(lab) as line:
            assert callable(lab.progress)        # the runs' own progress feeds the line
            line.say("explore A/B 1: compile=default · round 1 of 3")
            lab.progress("run abcd1234: measured · 1 s")
            line.said("explore 1: compile=default: B is faster")
        assert lab.progress is True
        got = capsys.readouterr()
        assert (got.out, got.err) == (out, ""), (echo, got)
