"""Running commands for the install tests: a command that must succeed, an environment
that does not point at this checkout's venv, whether a wheel builds without the network."""
from __future__ import annotations

import os
import subprocess


def sh(*cmd, cwd=None, env=None, timeout=600) -> subprocess.CompletedProcess:
    """Run a command; fail the test with its output unless it exits 0."""
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} -> {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def clean_env(**extra) -> dict:
    """This environment without what points Python or Jupyter at this checkout's venv."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("JUPYTER")}
    env.update(extra)
    return env


def setuptools_ok() -> bool:
    """setuptools new enough to build the wheel without build isolation (no network)."""
    try:
        import setuptools
        return int(setuptools.__version__.split(".")[0]) >= 77
    except ImportError:
        return False
