#!/usr/bin/env python3
"""Set up the project's environment and run the demo or the tests: needs only Python.

    python3 dev.py demo     # .venv + the package, then `python -m nbtools demo --html ...`
    python3 dev.py test     # .venv + test extras (+ Debian chromium, sshd for browser and two-host tests), the import
                            # contracts (lint-imports), then pytest; arguments go to pytest:
    python3 dev.py test -m "not slow"   # the fast tier (about 3 minutes on 2 cores)

A torch that already satisfies pyproject.toml's requirement (the tested range) is reused, not
replaced: if the interpreter running this script has one, the venv sees it through
--system-site-packages. Otherwise torch==$NBTOOLS_TORCH (default 2.13.0, the version we test
on CPU) is installed. `test` installs the [test] extra, which brings [lab,export,trace].
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("NBTOOLS_VENV", ROOT / ".venv"))
TORCH = os.environ.get("NBTOOLS_TORCH", "2.13.0")
CHROMIUM = "/usr/bin/chromium"


def _torch_range() -> tuple[tuple, tuple]:
    """(lowest, first excluded) torch minor from pyproject's "torch>=A.B,<C.D": one place."""
    text = (ROOT / "pyproject.toml").read_text()
    m = re.search(r'"torch>=(\d+)\.(\d+)\s*,\s*<(\d+)\.(\d+)"', text)
    if not m:
        sys.exit('dev.py: pyproject.toml has no "torch>=A.B,<C.D" dependency')
    a, b, c, d = map(int, m.groups())
    return (a, b), (c, d)


MIN_TORCH, TORCH_BELOW = _torch_range()


def sh(*cmd, **kw):
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def torch_version(python) -> tuple | None:
    code = "import torch,sys; sys.stdout.write(torch.__version__)"
    r = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    if r.returncode:
        return None
    parts = r.stdout.split("+")[0].split(".")
    return tuple(int(p) for p in parts[:2] if p.isdigit())


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_venv(extras: str) -> Path:
    py = venv_python()
    if not py.exists():
        base = torch_version(sys.executable)
        reuse = base is not None and MIN_TORCH <= base < TORCH_BELOW
        print(f"creating {VENV} ({'reusing this interpreter’s torch ' + '.'.join(map(str, base)) if reuse else 'new torch'})")
        venv.EnvBuilder(with_pip=True, system_site_packages=reuse).create(VENV)
    stamp = VENV / f".nbtools-installed-{extras or 'base'}"
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == want:
        link_jupyter_extension()
        return py
    have = torch_version(py)
    if have is None or not MIN_TORCH <= have < TORCH_BELOW:
        sh(py, "-m", "pip", "install", "-q", f"torch=={TORCH}")
    target = f"{ROOT}[{extras}]" if extras else str(ROOT)
    sh(py, "-m", "pip", "install", "-q", "-e", target)
    sh(py, "-m", "nbtools", "kernel", "install", "--sys-prefix")
    link_jupyter_extension()
    stamp.write_text(want)
    return py


def link_jupyter_extension() -> None:
    """An editable install leaves out pyproject's data-files: link the JupyterLab extension
    and enable its server side in the venv, as the wheel installs them."""
    labext = VENV / "share" / "jupyter" / "labextensions" / "torch-nbtools"
    labext.parent.mkdir(parents=True, exist_ok=True)
    if labext.is_symlink() or labext.exists():
        labext.unlink() if labext.is_symlink() else shutil.rmtree(labext)
    labext.symlink_to(ROOT / "nbtools" / "ui" / "labextension", target_is_directory=True)
    conf = VENV / "etc" / "jupyter" / "jupyter_server_config.d"
    conf.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "jupyter-config" / "jupyter_server_config.d" / "torch-nbtools.json", conf)


# Debian packages the tests drive for real: chromium for the browser tests (Playwright's own
# browser download cannot work offline), sshd/ssh for the two simulated hosts of
# tests/test_hosts.py (ipyparallel's SSH launcher between network namespaces) and OpenMPI's
# mpirun for the README's MPI recipe there, Slurm (and munge) for its sbatch script there.
SYSTEM_PACKAGES = {CHROMIUM: "chromium", "/usr/sbin/sshd": "openssh-server", "/usr/bin/ssh": "openssh-client",
                   "/usr/bin/mpirun": "openmpi-bin", "/usr/sbin/slurmctld": "slurmctld",
                   "/usr/sbin/slurmd": "slurmd", "/usr/bin/sbatch": "slurm-client",
                   "/usr/sbin/munged": "munge"}


def ensure_system_packages() -> None:
    missing = [pkg for path, pkg in SYSTEM_PACKAGES.items() if not Path(path).exists()]
    if not missing:
        return
    if shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        sh("apt-get", "update", "-qq", env=env)
        sh("apt-get", "install", "-y", "-qq", *missing, env=env)
    else:
        print(f"warning: {', '.join(missing)} missing; the browser tests fail and the simulated-host "
              f"tests skip. Install Debian's packages: apt-get install {' '.join(missing)}",
              file=sys.stderr)


def main(argv) -> int:
    if not argv or argv[0] not in ("demo", "test", "setup"):
        print(__doc__)
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "demo":
        py = ensure_venv("")
        out = ROOT / "artifacts"
        out.mkdir(exist_ok=True)
        return subprocess.call([str(py), "-m", "nbtools", "demo", "--history",
                                str(out / "demo-runs"), "--html", str(out / "demo.html"), *rest])
    py = ensure_venv("test")
    if cmd == "setup":
        return 0
    # the layering (.importlinter) first: seconds, and a broken contract explains itself
    rc = subprocess.call([str(py.parent / "lint-imports"), "--config", str(ROOT / ".importlinter")],
                         cwd=ROOT)
    if rc:
        return rc
    ensure_system_packages()
    return subprocess.call([str(py), "-m", "pytest", *rest], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
