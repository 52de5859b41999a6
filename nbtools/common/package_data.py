"""Where the files shipped inside the package are: the tutorial notebooks, the kernel spec,
the docs the notebooks link to, and the recorded H200 profiles.

In the repository nbtools/notebooks, nbtools/kernels and nbtools/docs are links to the
top-level folders (one copy, edited there); a wheel or sdist holds real files at the same
paths (pyproject's package-data). So the package only ever reads its own folder."""
from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent.parent     # the nbtools package folder
KERNEL_NAME = "torch-nbtools"


class IncompleteInstall(FileNotFoundError):
    """A shipped file is missing: the package was installed without its package data."""


def _need(path: Path, what: str) -> Path:
    if not path.exists():
        raise IncompleteInstall(
            f"{what} is missing from the installed package ({path}); reinstall torch-nbtools "
            "from a wheel or a clone (pip install --force-reinstall torch-nbtools)")
    return path


def notebooks_dir() -> Path:
    """The tutorial notebooks shipped with the package (a clear error if the install lacks them)."""
    return _need(HERE / "notebooks", "the tutorial notebooks folder")


def notebooks() -> list[Path]:
    """The tutorials in teaching order (their names start with a number)."""
    return sorted(notebooks_dir().glob("*.ipynb"))


def kernel_dir() -> Path:
    """The folder of the torch-nbtools kernel spec shipped with the package."""
    return _need(HERE / "kernels" / KERNEL_NAME / "kernel.json", "the kernel spec").parent


def docs() -> list[Path]:
    """The Markdown docs the notebooks link to (findings, design, benchmarks)."""
    return sorted((HERE / "docs").glob("*.md"))


def h200_traces_dir() -> Path:
    """Kineto traces recorded on 2 x H200, shipped for demos and tests without a GPU."""
    return HERE / "data" / "h200"


def source_checkout() -> Path | None:
    """The repository root when running from a clone or an editable install (the links are
    there), else None: an installed wheel."""
    link = HERE / "notebooks"
    return link.resolve().parent if link.is_symlink() else None
