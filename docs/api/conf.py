"""Sphinx configuration of the API reference: autodoc reads nbtools' docstrings, napoleon
reads their Google-style sections (Args, Returns, Raises, Example).

Build it by hand from the repository root (the ``docs`` extra brings Sphinx and the theme)::

    pip install -e '.[docs]'
    python -m sphinx -W --keep-going -b html docs/api build/api   # then open build/api/index.html

tests/install/test_api_reference.py builds it the same way, warnings as errors, in CI.
"""
from __future__ import annotations

import sys
from pathlib import Path

# This checkout's nbtools, not whichever one the interpreter has installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import nbtools  # noqa: E402

project = "torch-nbtools"
release = version = nbtools.__version__
copyright = "the torch-nbtools authors"

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
# Google style only: one way to write a docstring's sections
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_attr_annotations = True

autodoc_member_order = "bysource"      # the order the code tells it in, not alphabetical
autodoc_typehints = "signature"
autodoc_class_signature = "mixed"
autodoc_preserve_defaults = True       # `rounds=5`, not the evaluated default's repr
autodoc_inherit_docstrings = True

html_theme = "furo"
html_title = f"torch-nbtools {release}: API reference"
templates_path: list[str] = []
exclude_patterns: list[str] = []
# Quotes stay as typed: docstrings quote code ("step_ms", it's) and a reader copies it.
smartquotes = False
