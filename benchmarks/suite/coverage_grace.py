"""pytest plugin for measuring the suite's coverage (docs/benchmarks.md, "The full suite"):
a lab ends its engines with SIGKILL, which leaves coverage.py no chance to save what an
engine ran; under measurement they get SIGTERM and 3 s first (coverage.toml: sigterm)."""
import nbtools.lab.reaper as reaper

_kill = reaper.kill


def kill(pids, grace: float = 0.0):
    return _kill(pids, grace=max(grace, 3.0))


reaper.kill = kill
