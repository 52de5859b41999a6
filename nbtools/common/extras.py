"""Optional dependencies: which extra of torch-nbtools brings which module, and one clear
message when it is missing, naming what installs on the person's own torch build."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import shlex
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

# module -> the extra that installs it (pyproject.toml [project.optional-dependencies])
EXTRA_OF = {
    "jupyterlab": "lab", "ipywidgets": "lab", "jupyter_bokeh": "lab",
    "nbclient": "export", "nbconvert": "export", "nbformat": "export",
    "transformers": "models",
    "tlparse": "trace",
}
# torchvision is in no extra: PyPI's wheel pairs with PyPI's CUDA torch of one version only;
# beside a CPU build (or another CUDA build) it fails to import (torchvision::nms does not
# exist) and takes `from transformers import LlamaConfig` down with it. The hint names the
# build of torchvision that matches the torch installed here instead.
PYTORCH_INDEX = "https://download.pytorch.org/whl"


DIST = "torch-nbtools"


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the extra and the pip
    command for where this nbtools came from."""
    pass


def installed_from() -> tuple[str, str | None]:
    """Where the running nbtools came from: ("clone", repository root) for a source tree
    (run from a clone, or an editable install of one), ("wheel", the wheel's path) or
    ("folder", its path) from pip's direct_url.json, ("index", None) for a package pip took
    from an index (none of those records), ("unknown", None) without any package metadata."""
    from nbtools.common.package_data import source_checkout
    root = source_checkout()
    if root is not None:          # the code running now, whatever else is installed
        return "clone", str(root)
    try:
        dist = importlib.metadata.distribution(DIST)
    except importlib.metadata.PackageNotFoundError:
        return "unknown", None
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "null")
    except ValueError:
        direct = None
    if not direct or not str(direct.get("url", "")).startswith("file:"):
        return "index", None
    path = unquote(urlparse(direct["url"]).path)
    if direct.get("dir_info", {}).get("editable"):
        return "clone", path
    return ("wheel" if path.endswith(".whl") else "folder"), path


def install_command(*extras: str) -> str:
    """The one pip command, for this interpreter, that adds ``extras`` to the nbtools that
    runs here, from where it was installed: a clone's own folder (editable, as dev.py and the
    README install it), the wheel's path, or the package index once that is where it came
    from. Every missing-extra message uses it."""
    how, path = installed_from()
    names = ",".join(sorted(set(extras)))
    pip = f"{shlex.quote(sys.executable)} -m pip install"
    if how == "clone":
        return f"{pip} -e {shlex.quote(f'{path}[{names}]')}"
    if how in ("wheel", "folder"):
        gone = "" if Path(path).exists() else f"  (the {how} you installed from, no longer there)"
        return f"{pip} {shlex.quote(f'{path}[{names}]')}{gone}"
    if how == "index":
        return f"{pip} {shlex.quote(f'{DIST}[{names}]')}"
    return (f"{pip} -e '.[{names}]' from a clone of torch-nbtools, or "
            f"{pip} 'torch_nbtools-VERSION-py3-none-any.whl[{names}]' from its wheel")


def missing(*modules: str) -> list[str]:
    """Those of ``modules`` that cannot be imported here (found without importing them)."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def torch_build() -> tuple[str | None, str | None]:
    """(torch's version, e.g. '2.13.0+cpu', its CUDA version or None for a CPU build), read
    from torch/version.py: common/ never imports torch, and a hint must not cost its import."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None, None
    try:
        text = (Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text()
    except OSError:
        return None, None
    ver = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M)
    cuda = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)", text, re.M)
    return (ver.group(1) if ver else None), (cuda.group(1) if cuda else None)


def torchvision_command(version: str | None = None, cuda: str | None = None) -> str:
    """The pip command for the torchvision built for this torch (torchvision 0.N pairs with
    torch 2.(N-15)), from PyTorch's index for its build (cpu, cu130, ...)."""
    if version is None:
        version, cuda = torch_build()
    m = re.match(r"2\.(\d+)", version or "")
    if not m:
        return "pip install torchvision (the release paired with your torch)"
    build = "cpu" if not cuda else "cu" + cuda.replace(".", "")
    return (f"pip install 'torchvision==0.{int(m.group(1)) + 15}.*' --index-url "
            f"{PYTORCH_INDEX}/{build}")


def hint(module: str) -> str:
    """How to install ``module`` beside the torch installed here."""
    if module == "torchvision":
        version, cuda = torch_build()
        build = f"torch {version} ({'CUDA ' + cuda if cuda else 'CPU'} build)" if version else "your torch"
        return (f"{torchvision_command(version, cuda)}  (the torchvision built for {build}; "
                "PyPI's plain `pip install torchvision` matches only PyPI's CUDA torch of the "
                "same release and, beside any other, breaks `import transformers` too)")
    extra = EXTRA_OF.get(module)
    return install_command(extra) if extra else f"pip install {module}"


def require(*modules: str, why: str) -> None:
    """Raise MissingExtra naming the pip command that installs ``modules``."""
    gone = missing(*modules)
    if gone:
        extras = sorted({EXTRA_OF[m] for m in gone if m in EXTRA_OF})
        cmds = ([install_command(*extras)] if extras else []) + \
            [hint(m) for m in gone if m not in EXTRA_OF]
        raise MissingExtra(f"{why} needs {', '.join(gone)}, which "
                           f"{'is' if len(gone) == 1 else 'are'} not installed for "
                           f"{sys.executable}: {'; and '.join(cmds)}")
