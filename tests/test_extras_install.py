"""Every extra installs beside a CPU torch without replacing it or breaking another package
(issue 26): a fresh venv gets torch 2.13.0 (the CPU build), then the wheel with each extra in
turn, models first (its torchvision once broke `from transformers import LlamaConfig` there).
One venv for all extras on purpose: after each install every earlier check must still hold,
which is what a person adding extras one by one meets. Needs the package registry (pip's
cache makes a second run quick)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from test_install import ROOT, _setuptools_ok, clean_env, sh

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


@pytest.mark.timeout(1800)     # a first run downloads every extra's packages
def test_each_extra_installs_beside_cpu_torch(tmp_path):
    clone = tmp_path / "clone"
    sh("git", "clone", "-q", ROOT, clone)
    isolation = ["--no-build-isolation"] if _setuptools_ok() else []
    sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, clone,
       "-w", tmp_path / "dist", env=clean_env())
    wheel, = (tmp_path / "dist").glob("torch_nbtools-*.whl")
    venv = tmp_path / "venv"
    sh(sys.executable, "-m", "venv", venv)
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
    sh(*pip_install, f"torch=={TORCH}", env=env, timeout=900)
    torch_before = sh(py, "-c", TORCH_IS, env=env).stdout.strip()
    assert torch_before.startswith(TORCH) and torch_before.endswith("None"), torch_before  # CPU
    done = []
    for extra in IMPORTS:
        sh(*pip_install, f"{wheel}[{extra}]", env=env, timeout=900)
        done.append(extra)
        check = subprocess.run([py, "-m", "pip", "check"], capture_output=True, text=True, env=env)
        assert check.returncode == 0, f"after [{extra}]: {check.stdout}{check.stderr}"
        # torch as before, and nothing installed since broke what worked before: one fresh
        # interpreter runs every check (each its own statement list, in install order)
        code = "\n".join([TORCH_IS] + [IMPORTS[earlier] for earlier in done])
        torch_now = sh(py, "-c", code, env=env, cwd=tmp_path).stdout.splitlines()[0].strip()
        assert torch_now == torch_before, f"[{extra}] replaced torch: {torch_now}"
    # torchvision is in no extra; the message names the build for this torch
    hint = sh(py, "-c", "from nbtools.common.extras import hint; print(hint('torchvision'))",
              env=env, cwd=tmp_path).stdout
    assert "torchvision==0.28.*" in hint and "download.pytorch.org/whl/cpu" in hint, hint
    tv = subprocess.run([py, "-c", "import torchvision"], capture_output=True, env=env)
    assert tv.returncode != 0, "an extra brought torchvision"
