"""Every public callable says what it does, and every public module is in the API reference.

Public: a module whose dotted path has no part starting with "_", and in it every function
and class defined there (not imported) whose name has no leading "_", with the public
methods, properties and nested classes of its public classes. Read from the source (ast),
so it is fast, imports nothing, and sees neither imported names nor the methods a
dataclass generates. docs/api/ is the reference Sphinx builds from these docstrings
(tests/install/test_api_reference.py builds it)."""
from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from support.paths import ROOT

PKG = ROOT / "nbtools"
API = ROOT / "docs" / "api"
# the types a person holds after a call: their docstrings carry Google-style sections
SECTIONED = {"Lab": ("Args", "Example"), "Lab.run": ("Args", "Returns", "Raises", "Example"),
             "Lab.ab": ("Args", "Returns", "Example"), "Lab.compare": ("Args", "Returns", "Example"),
             "Lab.advise": ("Args", "Returns", "Example"), "Lab.panel": ("Args", "Returns", "Example"),
             "StepConfig": ("Example",), "StepConfig.replace": ("Args", "Returns", "Raises", "Example"),
             "Run": ("Example",), "Run.plot": ("Args", "Returns", "Example"),
             "Verdict": ("Example",), "History": ("Example",), "History.load": ("Args", "Returns", "Example"),
             "Comparison": ("Example",), "Comparison.verdict": ("Returns", "Example"),
             "Comparison.table": ("Returns",)}


def public_modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not any(p.startswith("_") for p in parts):
            out[".".join(parts)] = path
    return out


def _defs(body):
    """Definitions at this level, also those under module-level if/try (optional imports)."""
    for node in body:
        if isinstance(node, (ast.If, ast.Try)):
            yield from _defs(node.body)
            for handler in getattr(node, "handlers", []):
                yield from _defs(handler.body)
            yield from _defs(node.orelse)
        else:
            yield node


def _skipped(node) -> bool:
    """A property's setter/deleter shares its getter's docstring; @overload stubs have none."""
    for d in getattr(node, "decorator_list", []):
        text = ast.unparse(d)
        if text.endswith((".setter", ".deleter")) or text in ("overload", "typing.overload"):
            return True
    return False


@functools.cache
def public_callables() -> tuple[tuple[str, str, ast.AST, Path], ...]:
    """(module, qualified name, node, file) for every public callable."""
    found = []

    def visit(module, path, body, prefix):
        for node in _defs(body):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if node.name.startswith("_") or _skipped(node):
                continue
            found.append((module, prefix + node.name, node, path))
            if isinstance(node, ast.ClassDef):
                visit(module, path, node.body, prefix + node.name + ".")

    for module, path in public_modules().items():
        visit(module, path, ast.parse(path.read_text(), str(path)).body, "")
    return tuple(found)


def test_every_public_callable_has_a_docstring():
    found = public_callables()
    missing = [f"{m}.{q}  ({p.relative_to(ROOT)}:{n.lineno})" for m, q, n, p in found
               if not (ast.get_docstring(n) or "").strip()]
    assert len(found) > 500, f"the walk found only {len(found)} public callables"
    assert not missing, (f"{len(missing)} of {len(found)} public callables have no docstring "
                         "(say what it does or returns, and why where it is not obvious):\n"
                         + "\n".join(missing))


def test_the_types_a_person_holds_have_google_sections():
    docs = {q: ast.get_docstring(n) or "" for m, q, n, p in public_callables()
            if m in ("nbtools.lab.lab", "nbtools.config.step_config", "nbtools.results.run",
                     "nbtools.analysis.verdict", "nbtools.results.history",
                     "nbtools.results.comparison")}
    wrong = []
    for name, sections in SECTIONED.items():
        assert name in docs, f"{name} is no longer where this test looks: update SECTIONED"
        lacking = [s for s in sections if not re.search(rf"^{s}:\s*$", docs[name], re.M)]
        if lacking:
            wrong.append(f"{name}: no {', '.join(lacking)} section")
        if "Example" in sections and ">>> " not in docs[name]:
            wrong.append(f"{name}: its Example has no '>>> ' line")
    assert not wrong, "\n".join(wrong)


def test_every_public_module_is_in_the_api_reference():
    pages = "\n".join(p.read_text() for p in API.glob("*.rst"))
    listed = set(re.findall(r"^\.\. automodule:: (\S+)\s*$", pages, re.M))
    missing = sorted(set(public_modules()) - listed)
    gone = sorted(listed - set(public_modules()))
    assert not missing, ("public modules on no docs/api page (add an automodule to the page "
                         f"of their room): {missing}")
    assert not gone, f"docs/api names modules that are not there (or not public): {gone}"
