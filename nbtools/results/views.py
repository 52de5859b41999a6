"""How results show themselves, without the data importing the view.

Run, Comparison (and the Lab's panel) are data and the client; the figures, tables and
widgets that show them live in ``nbtools.ui`` and ``nbtools.widgets``, which sit above them
(they read runs and drive the lab). Their ``views`` modules fill this table when imported,
and the data classes look a view up here by name, importing the provider on first use: the same arrangement as
pandas' plotting backend. So ``import nbtools.results`` never loads bokeh or ipywidgets, and
the import contracts (.importlinter) hold with no exception: ui -> results, never back.
"""
from __future__ import annotations

import importlib
from typing import Callable

# view -> the module that registers it when imported
PROVIDERS = {"run.plot": "nbtools.ui.views", "run.html": "nbtools.ui.views",
             "comparison.plot": "nbtools.ui.views", "comparison.html": "nbtools.ui.views",
             "exploration.plot": "nbtools.ui.views", "exploration.html": "nbtools.ui.views",
             "lab.panel": "nbtools.widgets.views", "lab.progress": "nbtools.widgets.views"}
KINDS = tuple(PROVIDERS)

_views: dict[str, Callable] = {}


def register(kind: str):
    """Decorator: ``fn`` is how ``kind`` (one of KINDS) is shown."""
    if kind not in KINDS:
        raise ValueError(f"unknown view {kind!r}; known: {', '.join(KINDS)}")

    def put(fn: Callable) -> Callable:
        _views[kind] = fn
        return fn
    return put


def view(kind: str) -> Callable:
    """The view registered for ``kind`` (e.g. "run.plot"), importing its provider first:
    results never import the ui, the ui registers itself."""
    if kind not in _views:
        importlib.import_module(PROVIDERS[kind])
    return _views[kind]
