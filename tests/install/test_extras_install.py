"""Every extra installs beside a CPU torch without replacing it or breaking another package
(issue 26): a fresh venv gets torch 2.13.0 (the CPU build), then the wheel with each extra in
turn, models first (its torchvision once broke `from transformers import LlamaConfig` there).
One venv for all extras on purpose: after each install every earlier check must still hold,
which is what a person adding extras one by one meets. Needs the package registry (pip's
cache makes a second run quick).

The venv is kept (~/.cache/nbtools-tests, or $NBTOOLS_TEST_CACHE) under a hash of what it
installs: pyproject's dependencies and these extras' requirements, the torch pin, the checks
and the interpreter. A run that finds a venv under its hash, which an earlier run built one
extra at a time with every check holding, puts this checkout's wheel in it (no dependency
changes: the hash says they are the same) and runs every check again; a change to any of
those builds it again from nothing (~300 s on 2 cores). A newer release on the index is
not in the hash (the project has no lock): remove the folder to build against it."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from support.paths import ROOT
from support.install import clean_env, setuptools_ok, sh

pytestmark = pytest.mark.slow

TORCH = "2.13.0"
# extra -> code that must run after it is installed (and after every later extra)
IMPORTS = {
    "models": "from transformers import LlamaConfig, LlamaForCausalLM; import nbtools.models as m; "
              "m.llama(batch=1, seq=8)",
    "lab": "import jupyterlab, ipywidgets, jupyter_bokeh",
    "export": "import nbclient, nbconvert, nbformat",
    # tlparse is a program (Rust), installed beside the interpreter, not a module
    "trace": "import pathlib, subprocess, sys; subprocess.run([str(pathlib.Path(sys.executable)"
             ".parent / 'tlparse'), '--help'], check=True, capture_output=True)",
}
TORCH_IS = "import torch; print(torch.__version__, torch.__file__, torch.version.cuda)"
PROVEN = "nbtools-tests-proven"     # written last, by a build whose every check held


def install_key() -> str:
    """What the venv's packages follow from: a change to any of it builds the venv again."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {})
    what = dict(torch=TORCH, python=sys.version, dependencies=project.get("dependencies", []),
                extras={e: extras.get(e) for e in IMPORTS}, checks=IMPORTS)
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def cache_dir() -> Path:
    base = os.environ.get("NBTOOLS_TEST_CACHE") or \
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nbtools-tests"
    return Path(base)


@pytest.mark.timeout(1800)     # a first run downloads every extra's packages
def test_each_extra_installs_beside_cpu_torch(tmp_path):
    clone = tmp_path / "clone"
    sh("git", "clone", "-q", ROOT, clone)
    isolation = ["--no-build-isolation"] if setuptools_ok() else []
    sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, clone,
       "-w", tmp_path / "dist", env=clean_env())
    wheel, = (tmp_path / "dist").glob("torch_nbtools-*.whl")
    venv = cache_dir() / f"extras-venv-{install_key()}"
    py = venv / "bin" / "python"
    # The venv's interpreters write the bytecode of what they import, as on a person's
    # machine: with PYTHONDONTWRITEBYTECODE=1 (set on some hosts, this project's build box
    # among them) each of the six fresh interpreters below compiled torch's and
    # transformers' sources again, 15-22 s of CPU each.
    env = {k: v for k, v in clean_env().items() if k != "PYTHONDONTWRITEBYTECODE"}
    # --no-compile: byte-compiling every installed file is 40 % of torch's install CPU (on 2
    # cores user+sys 34.4 -> 20.2 s) and tests nothing here; what the checks import compiles
    # itself, once
    pip_install = [py, "-m", "pip", "install", "-q", "--no-compile"]

    def checks_hold(done, torch_before):
        check = subprocess.run([py, "-m", "pip", "check"], capture_output=True, text=True, env=env)
        assert check.returncode == 0, f"after [{done[-1]}]: {check.stdout}{check.stderr}"
        # torch as before, and nothing installed since broke what worked before: one fresh
        # interpreter runs every check (each its own statement list, in install order)
        code = "\n".join([TORCH_IS] + [IMPORTS[earlier] for earlier in done])
        torch_now = sh(py, "-c", code, env=env, cwd=tmp_path).stdout.splitlines()[0].strip()
        assert torch_now == torch_before, f"[{done[-1]}] replaced torch: {torch_now}"

    if (venv / PROVEN).exists():
        # this checkout's code in the proven venv; its dependencies are the hash's
        sh(*pip_install, "--no-deps", "--force-reinstall", wheel, env=env, timeout=900)
        checks_hold(list(IMPORTS), (venv / PROVEN).read_text().strip())
    else:
        shutil.rmtree(venv, ignore_errors=True)        # a build that stopped part-way
        venv.parent.mkdir(parents=True, exist_ok=True)
        sh(sys.executable, "-m", "venv", venv)
        sh(*pip_install, f"torch=={TORCH}", env=env, timeout=900)
        torch_before = sh(py, "-c", TORCH_IS, env=env).stdout.strip()
        assert torch_before.startswith(TORCH) and torch_before.endswith("None"), torch_before
        done = []
        for extra in IMPORTS:
            sh(*pip_install, f"{wheel}[{extra}]", env=env, timeout=900)
            done.append(extra)
            checks_hold(done, torch_before)
        (venv / PROVEN).write_text(torch_before + "\n")
    # torchvision is in no extra; the message names the build for this torch
    hint = sh(py, "-c", "from nbtools.common.extras import hint; print(hint('torchvision'))",
              env=env, cwd=tmp_path).stdout
    assert "torchvision==0.28.*" in hint and "download.pytorch.org/whl/cpu" in hint, hint
    tv = subprocess.run([py, "-c", "import torchvision"], capture_output=True, env=env)
    assert tv.returncode != 0, "an extra brought torchvision"
