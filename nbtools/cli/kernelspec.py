"""Install the shipped kernel spec (kernels/torch-nbtools/kernel.json, package data) as a
Jupyter kernel that runs this interpreter, so the notebooks (and the engines they start,
which use the same interpreter) see the project's environment."""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from nbtools.common.package_data import KERNEL_NAME as NAME
from nbtools.common.package_data import kernel_dir


def spec_json(python: str = sys.executable) -> dict:
    """The shipped spec, every field as written, with the interpreter resolved."""
    spec = json.loads((kernel_dir() / "kernel.json").read_text())
    spec["argv"][0] = python
    return spec


def install(user: bool = False, prefix: str | None = None) -> str:
    """Install the torch-nbtools kernel spec (this interpreter) for Jupyter: into ``prefix``,
    the user's folder with ``user``, else this environment's prefix. Returns where it went."""
    from jupyter_client.kernelspec import KernelSpecManager
    src = kernel_dir()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / NAME
        d.mkdir()
        (d / "kernel.json").write_text(json.dumps(spec_json(), indent=1) + "\n")
        for extra in src.iterdir():   # logos and whatever else the spec folder ships
            if extra.name != "kernel.json" and extra.is_file():
                shutil.copy(extra, d)
        if prefix is None and not user:
            prefix = sys.prefix
        return KernelSpecManager().install_kernel_spec(str(d), NAME, user=user, prefix=prefix)


def ensure_kernel(say=print) -> None:
    """The notebooks ask for the torch-nbtools kernel: install it for this interpreter when
    Jupyter does not know it yet (`nbtools lab` and `nbtools export` right after pip install;
    never replacing one the user installed). Into this environment, else the user's folder
    when the environment is read-only (a system Python)."""
    import os
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    try:
        spec = KernelSpecManager().get_kernel_spec(NAME)
        if spec.argv and os.path.realpath(spec.argv[0]) != os.path.realpath(sys.executable):
            say(f"note: the {NAME} kernel runs {spec.argv[0]}, not this interpreter; "
                f"`{sys.executable} -m nbtools kernel install` points it here")
    except NoSuchKernel:
        try:
            where = install()
        except PermissionError:
            where = install(user=True)
        say(f"installed the {NAME} kernel in {where} (first use; runs {sys.executable})")
