#!/usr/bin/env python3
"""Set up the project's environment and run the demo or the tests: needs only Python.

    python3 dev.py demo     # .venv + the package, then `python -m nbtools demo --html ...`
    python3 dev.py test -m "not slow"   # the fast tier: .venv + test extras, the import contracts
                                        # (lint-imports), then pytest; installs nothing system-wide
    python3 dev.py test     # the full suite (CI's): also installs Debian's chromium, sshd, OpenMPI,
                            # Slurm and munge system-wide (as root, saying so first) for the
                            # browser and simulated-host tests; arguments go to pytest

A torch that already satisfies pyproject.toml's requirement (the accepted range) is reused, not
replaced: if the interpreter running this script has one, the venv sees it through
--system-site-packages. Otherwise torch==$NBTOOLS_TORCH (default 2.13.0, the version CI tests
on CPU) is installed: on a host without an NVIDIA GPU the CPU build, from PyTorch's CPU index
when it answers (else it says what pip's own index gives instead). `test` installs the [test]
extra, which brings [lab,export,trace,models], and [docs] (Sphinx: the API reference's test).
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
CPU_INDEX = os.environ.get("NBTOOLS_TORCH_INDEX", "https://download.pytorch.org/whl/cpu")
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
        compile_sources(py)
        return py
    have = torch_version(py)
    if have is None or not MIN_TORCH <= have < TORCH_BELOW:
        install_torch(py)
    target = f"{ROOT}[{extras}]" if extras else str(ROOT)
    sh(py, "-m", "pip", "install", "-q", "-e", target)
    sh(py, "-m", "nbtools", "kernel", "install", "--sys-prefix")
    link_jupyter_extension()
    compile_sources(py)
    stamp.write_text(want)
    return py


def compile_sources(py) -> None:
    """Byte-compile the package's sources, as pip does for a package it installs but not for
    an editable one: where PYTHONDONTWRITEBYTECODE=1 is set (some hosts), every engine,
    kernel and CLI process otherwise compiled nbtools again (0.2-0.3 s of CPU each, some
    hundreds of them in a test run). Files already compiled are skipped; Python recompiles
    an edited file in memory as before."""
    # check=False: a syntax error is the import's to report, not set-up's
    subprocess.run([str(py), "-m", "compileall", "-q", str(ROOT / "nbtools")],
                   stdout=subprocess.DEVNULL, check=False)


def nvidia_gpu() -> bool:
    """An NVIDIA driver here (its /proc entry, or nvidia-smi on PATH)."""
    return Path("/proc/driver/nvidia").exists() or shutil.which("nvidia-smi") is not None


def reachable(url: str, timeout: float = 5.0) -> bool:
    import urllib.request
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/torch/", timeout=timeout):
            return True
    except Exception:   # noqa: BLE001 - any failure means: not from here
        return False


def what_pip_gives(py, requirement: str) -> str:
    """What `pip install REQUIREMENT` would take from pip's own index, read with --dry-run
    (its version, e.g. 2.13.0+cpu, and where from), without installing it."""
    import json
    r = subprocess.run([str(py), "-m", "pip", "install", "--dry-run", "--no-deps", "-q",
                        "--ignore-installed", "--report", "-", requirement],
                       capture_output=True, text=True)
    try:
        item = json.loads(r.stdout)["install"][0]
    except (ValueError, KeyError, IndexError):
        return "whatever pip's index holds for it"
    version = item["metadata"]["version"]
    build = ("a CPU build" if version.endswith("+cpu") else
             "a CUDA build: several GB of nvidia packages come with it" if "+cu" in version or
             any("nvidia" in d or "cuda" in d for d in item["metadata"].get("requires_dist", []))
             else "its build")
    return f"torch {version} ({build}) from {item['download_info']['url']}"


def install_torch(py) -> None:
    """torch==TORCH into the venv. Without an NVIDIA GPU, the CPU build: PyTorch's CPU index
    has it; PyPI's Linux wheel is the CUDA build with several GB of nvidia packages."""
    want = f"torch=={TORCH}"
    if nvidia_gpu():
        print(f"an NVIDIA driver is here: installing {want} from pip's index (its CUDA build)")
        sh(py, "-m", "pip", "install", "-q", want)
    elif reachable(CPU_INDEX):
        print(f"no NVIDIA GPU here: installing {want}, the CPU build, from {CPU_INDEX}")
        sh(py, "-m", "pip", "install", "-q", want, "--index-url", CPU_INDEX)
    else:
        print(f"no NVIDIA GPU here, and PyTorch's CPU index ({CPU_INDEX}) does not answer: "
              f"installing {want} through pip's own index instead, which gives "
              f"{what_pip_gives(py, want)}. NBTOOLS_TORCH_INDEX=URL names another index "
              "with CPU builds.", flush=True)
        sh(py, "-m", "pip", "install", "-q", want)


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
# tests/lab/test_hosts.py (ipyparallel's SSH launcher between network namespaces) and OpenMPI's
# mpirun for docs/clusters.md's MPI recipe there, Slurm (and munge) for its sbatch script there.
SYSTEM_PACKAGES = {CHROMIUM: "chromium", "/usr/sbin/sshd": "openssh-server", "/usr/bin/ssh": "openssh-client",
                   "/usr/bin/mpirun": "openmpi-bin", "/usr/sbin/slurmctld": "slurmctld",
                   "/usr/sbin/slurmd": "slurmd", "/usr/bin/sbatch": "slurm-client",
                   "/usr/sbin/munged": "munge"}


def fast_tier(pytest_args) -> bool:
    """`-m "not slow"` (or -m=..., -m"..."): the tier that needs nothing outside the venv."""
    exprs = []
    for i, a in enumerate(pytest_args):
        if a == "-m" and i + 1 < len(pytest_args):
            exprs.append(pytest_args[i + 1])
        elif a.startswith("-m") and a != "-m":
            exprs.append(a[2:].lstrip("="))
    return any(re.search(r"\bnot\s+slow\b", e) for e in exprs)


def ensure_system_packages() -> None:
    missing = [pkg for path, pkg in SYSTEM_PACKAGES.items() if not Path(path).exists()]
    if not missing:
        return
    if shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        print(f"the full suite drives Debian's {', '.join(missing)} (browser and simulated-host "
              "tests): installing them system-wide with apt-get now (the fast tier, "
              "-m \"not slow\", needs none of them)", flush=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        sh("apt-get", "update", "-qq", env=env)
        sh("apt-get", "install", "-y", "-qq", *missing, env=env)
    else:
        print(f"warning: {', '.join(missing)} missing; the browser tests fail and the simulated-host "
              f"tests skip. Install Debian's packages: apt-get install {' '.join(missing)}",
              file=sys.stderr)


WORKERS = int(os.environ.get("NBTOOLS_TEST_WORKERS", "2"))


def selects_tests(pytest_args) -> bool:
    """The person chose what runs, or how: -m/-k, workers (-n, --dist), or a test path."""
    for a in pytest_args:
        if a.startswith(("-m", "-k", "-n", "--numprocesses", "--dist")):
            return True
        if not a.startswith("-") and Path(a.split("::")[0]).exists():
            return True
    return False


def full_run(py, rest) -> int:
    """The whole suite on WORKERS pytest-xdist workers, a module per worker at a time (a
    module's tests share its lab; tests/conftest.py sends the longest modules out first).
    docs/testing.md: times on 2 cores."""
    base = [str(py), "-m", "pytest", *rest]
    if WORKERS < 2:
        return subprocess.call(base, cwd=ROOT)
    print(f"the full suite on {WORKERS} workers (NBTOOLS_TEST_WORKERS=1: one)", flush=True)
    return subprocess.call(base + ["-n", str(WORKERS), "--dist", "loadfile",
                                   "--no-loadscope-reorder"], cwd=ROOT)


def next_steps() -> str:
    """What to type next: the package is in the venv, not in the `python3` that ran dev.py."""
    def here(p):
        r = os.path.relpath(p, Path.cwd())
        return r if not r.startswith("..") else str(p)
    rel, runs = here(VENV), here(ROOT / "nbtools-runs")
    return (f"\nnbtools is installed in {rel}, not in this python3: run it as "
            f"{rel}/bin/python -m nbtools ... (or `. {rel}/bin/activate` first, then every "
            f"`python -m nbtools ...` of the README works), e.g.\n"
            f"  {rel}/bin/python -m nbtools view {runs}     # the runs just saved\n"
            f"  {rel}/bin/python -m nbtools lab                   # the tutorials "
            f"(after `{rel}/bin/python -m pip install -e '.[lab]'`)")


def check_imports(lint_imports, config) -> int:
    """The layering (.importlinter), before the tests: seconds, and a broken contract
    explains itself. Quiet when every contract is kept (its banner and list are noise
    above the tests' own output); its whole report, on stdout, when one is broken."""
    r = subprocess.run([str(lint_imports), str(config)], cwd=ROOT, capture_output=True,
                       text=True)
    if r.returncode:
        print(r.stdout + r.stderr, end="", flush=True)
    return r.returncode


def main(argv) -> int:
    if not argv or argv[0] not in ("demo", "test", "setup"):
        print(__doc__)
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "demo":
        py = ensure_venv("")
        out = ROOT / "artifacts"
        out.mkdir(exist_ok=True)
        # the runs go where `nbtools view` (and the tutorials, ../nbtools-runs) keep them
        rc = subprocess.call([str(py), "-m", "nbtools", "demo", "--history", "nbtools-runs",
                              "--html", str(out / "demo.html"), *rest], cwd=ROOT)
        print(next_steps())
        return rc
    py = ensure_venv("test,docs")
    if cmd == "setup":
        return 0
    rc = check_imports(py.parent / "lint-imports", ROOT / ".importlinter")
    if rc:
        return rc
    if fast_tier(rest):
        print("fast tier: nothing outside the venv is installed or needed", flush=True)
        if not any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in rest):
            # its tests share no lab and no server: one worker per core (2 cores: 130 s
            # instead of 182 s, docs/testing.md); the full run: full_run
            rest = ["-n", str(max(1, min(4, os.cpu_count() or 1))), *rest]
    else:
        ensure_system_packages()
        if not selects_tests(rest):
            return full_run(py, rest)
    return subprocess.call([str(py), "-m", "pytest", *rest], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
