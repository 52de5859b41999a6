"""Install kernels/torch-nbtools as a Jupyter kernel that runs this interpreter, so the
notebooks (and the engines they start, which use the same interpreter) see the project's
environment."""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

NAME = "torch-nbtools"
SPEC_DIR = Path(__file__).resolve().parents[1] / "kernels" / NAME


def spec_json(python: str = sys.executable) -> dict:
    spec = json.loads((SPEC_DIR / "kernel.json").read_text()) if SPEC_DIR.exists() else {
        "argv": ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": NAME, "language": "python"}
    spec["argv"][0] = python
    return spec


def install(user: bool = False, prefix: str | None = None) -> str:
    from jupyter_client.kernelspec import KernelSpecManager
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / NAME
        d.mkdir()
        (d / "kernel.json").write_text(json.dumps(spec_json(), indent=1))
        for extra in SPEC_DIR.glob("*.png") if SPEC_DIR.exists() else ():
            shutil.copy(extra, d)
        if prefix is None and not user:
            prefix = sys.prefix
        return KernelSpecManager().install_kernel_spec(str(d), NAME, user=user, prefix=prefix)
