"""lab: where engines keep Python's compiled bytecode when torch's install has none.

Some images ship torch without ``__pycache__`` and set ``PYTHONDONTWRITEBYTECODE=1`` (or
install it read-only): every engine process then compiles torch's, torch._dynamo's and
sympy's sources again at import. On the 1 x H200 host this was 6.3 s of a fresh engine's
12-s first run (``builtins.compile`` on 1,835 files, cProfile, docs/benchmarks.md), paid
again by every spare and every later Lab(). Engines started by the lab then keep their
bytecode in a cache folder of ours (``PYTHONPYCACHEPREFIX``), compiled once per host and
Python, never written into the person's site-packages. Where torch's bytecode is there
(any normal pip install), nothing changes: a prefix would make Python ignore it.
``NBTOOLS_PYCACHE=0`` turns this off; a person's own ``PYTHONPYCACHEPREFIX`` wins.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path


def engine_env(package: str = "torch") -> dict:
    """Environment changes for the engines this lab starts: {} or the cache prefix (and
    ``PYTHONDONTWRITEBYTECODE`` cleared for them, so the prefix gets written)."""
    if os.environ.get("NBTOOLS_PYCACHE", "1") == "0" or os.environ.get("PYTHONPYCACHEPREFIX"):
        return {}
    if has_bytecode(package):
        return {}
    return {"PYTHONPYCACHEPREFIX": str(cache_folder()), "PYTHONDONTWRITEBYTECODE": ""}


def has_bytecode(package: str) -> bool:
    """Whether the package's ``__init__`` has a current compiled file beside it (found
    without importing the package: the lab's client never imports torch)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return True       # not importable here: nothing to speed up
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return True
    tag = sys.implementation.cache_tag
    if not tag:
        return True       # this Python writes no bytecode at all
    # where an engine without a prefix looks (not cache_from_source: it follows this
    # process's own -X pycache_prefix, which engines do not inherit)
    source = Path(spec.origin)
    cached = source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"
    try:   # a .pyc older than its source is compiled again anyway
        return os.stat(cached).st_mtime >= os.stat(spec.origin).st_mtime
    except OSError:
        return False


def cache_folder() -> Path:
    """Where engines keep compiled bytecode (XDG cache, per Python): shared by every lab, so
    engines start faster after the first."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    tag = sys.implementation.cache_tag or "python"
    return base / "nbtools" / f"pycache-{tag}"
