"""The layout holds: the import contracts, modules that stay small, data that loads no view,
and every view a data class looks up is registered by its provider (docs/design.md "Rooms")."""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import ROOT

PKG = ROOT / "nbtools"
SOFT_LINES = 400
"""Past this a module gets a warning: read it again as one concern (a module is one job
whatever its length; splitting by length alone made explore/explore_runs, issue 53)."""
MAX_LINES = 600
"""Past this no module is one concern: split it by job."""


def test_import_contracts_hold():
    lint = Path(sys.executable).parent / "lint-imports"
    if not lint.exists():
        pytest.fail(f"{lint} is missing: install the test extra (pip install -e '.[test]')")
    out = subprocess.run([str(lint), "--config", str(ROOT / ".importlinter")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_the_design_page_lists_every_import_contract():
    """docs/design.md's table of contracts names each one .importlinter holds (its id and its
    name), so the picture a reader trusts is the one lint-imports checks."""
    import configparser
    conf = configparser.ConfigParser()
    conf.read(ROOT / ".importlinter")
    page = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    contracts = {s.split(":")[-1]: conf[s]["name"] for s in conf.sections()
                 if s.startswith("importlinter:contract:")}
    missing = [f"{key}: {name}" for key, name in contracts.items()
               if f"| `{key}`: {name.split(' (')[0].split(':')[0]}" not in page]
    assert len(contracts) >= 10 and not missing, f"docs/design.md does not list: {missing}"


def test_modules_stay_one_concern():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in PKG.rglob("*.py")}
    long = {k: n for k, n in sizes.items() if SOFT_LINES < n <= MAX_LINES}
    if long:
        import warnings
        warnings.warn(f"over {SOFT_LINES} lines (still one concern?): {long}")
    big = {k: n for k, n in sizes.items() if n > MAX_LINES}
    assert not big, f"over {MAX_LINES} lines, split by job: {big}"


def test_every_room_says_what_it_runs():
    rooms = [p for p in PKG.iterdir() if (p / "__init__.py").exists()]
    assert {p.name for p in rooms} >= {"common", "config", "schema", "engine", "trace",
                                       "analysis", "results", "lab", "ui", "widgets", "report",
                                       "claims", "cli"}
    for room in rooms:
        doc = importlib.import_module(f"nbtools.{room.name}").__doc__
        assert doc and len(doc.split()) >= 5, f"nbtools/{room.name}/__init__.py needs a docstring"


def test_data_and_analysis_load_no_view_and_no_torch():
    """Loading a run's data, analysing it and listing its flags pulls in neither bokeh nor
    widgets nor torch (the contracts say so statically; this checks it at run time)."""
    code = ("import sys; import nbtools.results.run, nbtools.results.load, nbtools.results.history, "
            "nbtools.analysis.summary, nbtools.analysis.flags, nbtools.results.trace_export; "
            "print(sorted(m for m in ('torch', 'bokeh', 'ipywidgets', 'jupyter_bokeh', "
            "'ipyparallel') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_public_face():
    import nbtools
    from nbtools import Lab, Run, StepConfig, Workload, export_html, load_traces  # noqa: F401
    assert callable(export_html) and callable(load_traces) and nbtools.__version__


@pytest.mark.parametrize("kind", ["run.plot", "run.html", "comparison.plot", "comparison.html",
                                  "lab.panel", "lab.progress"])
def test_each_view_is_registered_by_its_provider(kind):
    from nbtools.results import views
    assert kind in views.PROVIDERS
    fn = views.view(kind)
    assert callable(fn) and fn.__module__ == views.PROVIDERS[kind]


def test_every_type_and_error_a_person_meets_comes_from_the_top_package():
    """What lab.run, lab.ab, lab.compare and lab.history hand back, and every error a person
    catches, import from ``nbtools`` itself (issue 35); ``import nbtools`` stays light."""
    import subprocess
    import sys
    names = ("Lab", "StepConfig", "Workload", "Run", "Comparison", "Verdict", "History",
             "Suggestion", "SSH",
             "RunFailed", "RunTimeout", "LabClosed", "ConfigError", "MissingExtra",
             "load_traces", "export_html")
    code = ("import sys, nbtools; light = 'pandas' not in sys.modules and 'torch' not in "
            "sys.modules; " + "; ".join(f"from nbtools import {n}" for n in names)
            + "; print(light, sorted(nbtools.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("True "), out
    for n in names:
        assert f"'{n}'" in out, n
    import nbtools
    from nbtools.results.errors import RunFailed, RunTimeout
    from nbtools.results.comparison import Comparison
    assert nbtools.RunFailed is RunFailed and nbtools.RunTimeout is RunTimeout
    assert nbtools.Comparison is Comparison


# What a notebook may import from nbtools: the top package and the tutorials' one public module.
PUBLIC_MODULES = {"nbtools", "nbtools.tutorial"}


def _notebook_code(path):
    import ast
    import json
    for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        if cell["cell_type"] == "code":
            src = "".join(cell["source"])
            # IPython magics and shell lines are not Python; the rest of the cell is
            src = "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                            for line in src.splitlines())
            yield i, ast.parse(src, filename=f"{path.name} cell {i}")


NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_notebooks_import_only_the_public_face(nb):
    """A tutorial shows the API a person should use: ``from nbtools import ...`` (names in
    ``nbtools.__all__``, or ``tutorial``) and ``nbtools.tutorial``; no deep imports (issue 35)."""
    import ast

    import nbtools
    allowed_names = set(nbtools.__all__) | {"tutorial"}
    bad = []
    for i, tree in _notebook_code(nb):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bad += [f"cell {i}: import {a.name}" for a in node.names
                        if a.name.split(".")[0] == "nbtools" and a.name not in PUBLIC_MODULES]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "nbtools":
                if node.module not in PUBLIC_MODULES:
                    bad.append(f"cell {i}: from {node.module} import ...")
                elif node.module == "nbtools":
                    bad += [f"cell {i}: from nbtools import {a.name}" for a in node.names
                            if a.name not in allowed_names]
    assert NOTEBOOKS and not bad, f"{nb.name} imports past the public face: {bad}"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_every_tutorial_name_a_notebook_uses_exists(nb):
    """``X.name`` in a notebook (X = nbtools.tutorial) is a name the module exports."""
    import ast

    from nbtools import tutorial
    used = {(i, node.attr) for i, tree in _notebook_code(nb) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "X"}
    missing = sorted((i, a) for i, a in used if a not in tutorial.__all__)
    assert not missing, f"{nb.name} uses names nbtools.tutorial does not export: {missing}"
    for name in tutorial.__all__:
        assert getattr(tutorial, name) is not None, name


# A module's _names are its own. Each exception says why it stays; keep this list short.
PRIVATE_ALLOWED: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _private_uses(path: Path):
    return _private_uses_in(path.read_text(encoding="utf-8"), _module_name(path),
                            path.name == "__init__.py")


def _private_uses_in(source: str, me: str, is_package: bool):
    """(line, module, name) for each private name of another nbtools module that module
    ``me`` imports (``from nbtools.x import _y``, relative too) or reads (``x._y`` after
    ``from nbtools import x`` / ``import nbtools.x as x``)."""
    import ast
    package = me if is_package else me.rpartition(".")[0]
    tree = ast.parse(source)
    modules = {}     # local name -> the nbtools module (or object) it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            if not base.startswith("nbtools"):
                continue
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__") and base != me:
                    yield node.lineno, base, a.name
                else:
                    modules[a.asname or a.name] = f"{base}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("nbtools") and a.asname:
                    modules[a.asname] = a.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__") and isinstance(node.value, ast.Name)
                and node.value.id in modules):
            yield node.lineno, modules[node.value.id], node.attr


def test_no_module_takes_another_modules_private_names():
    """Split by job: a name another module needs is public in the module whose job it is
    (issue 35 found 27 imports of other modules' ``_names``)."""
    found = [f"{p.relative_to(ROOT)}:{line}: {mod}.{name}"
             for p in sorted(PKG.rglob("*.py")) for line, mod, name in _private_uses(p)
             if (_module_name(p), name) not in PRIVATE_ALLOWED]
    assert not found, "private names used across modules:\n" + "\n".join(found)
    assert len(PRIVATE_ALLOWED) <= 3 and all(PRIVATE_ALLOWED.values())


def test_the_private_name_check_sees_every_spelling():
    """The check above can fail: each way of reaching another module's _name is caught, and
    a module's own _names and public names are not."""
    probe = ("from nbtools.lab.sweeps import _describe, table\n"
             "from .panel_parts import _x, ok\n"
             "from ..engine import liveness\n"
             "import nbtools.lab.keep_going as kg\n"
             "from nbtools.widgets.panel import _mine\n"
             "liveness._watch(1); kg._y; table._z; ok.fine; kg.__name__\n")
    got = sorted((m, n) for _, m, n in _private_uses_in(probe, "nbtools.widgets.panel", False))
    assert got == [("nbtools.engine.liveness", "_watch"), ("nbtools.lab.keep_going", "_y"),
                   ("nbtools.lab.sweeps", "_describe"), ("nbtools.lab.sweeps.table", "_z"),
                   ("nbtools.widgets.panel_parts", "_x")], got
