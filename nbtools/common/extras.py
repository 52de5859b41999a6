"""Optional dependencies: which extra of torch-nbtools brings which module, and one clear
message when it is missing."""
from __future__ import annotations

import importlib.util
import sys

# module -> the extra that installs it (pyproject.toml [project.optional-dependencies])
EXTRA_OF = {
    "jupyterlab": "lab", "ipywidgets": "lab", "jupyter_bokeh": "lab",
    "nbclient": "export", "nbconvert": "export", "nbformat": "export",
    "transformers": "models", "torchvision": "models",
    "tlparse": "trace",
}


class MissingExtra(ImportError):
    pass


def missing(*modules: str) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def require(*modules: str, why: str) -> None:
    """Raise MissingExtra naming the pip command that installs ``modules``."""
    gone = missing(*modules)
    if gone:
        extras = sorted({EXTRA_OF.get(m, "") for m in gone} - {""})
        spec = f"torch-nbtools[{','.join(extras)}]" if extras else " ".join(gone)
        raise MissingExtra(f"{why} needs {', '.join(gone)}, which is not installed for "
                           f"{sys.executable}: pip install '{spec}'")
