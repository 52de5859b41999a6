"""environment.yml and pyproject.toml say the same thing: every dependency of the package
and of the notebook extras it installs appears in the conda env with the same versions, and
the env asks for nothing the project does not declare."""
from __future__ import annotations

import re

try:
    import tomllib
except ImportError:          # Python 3.10: pip carries the same parser
    from pip._vendor import tomli as tomllib

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from support.paths import ROOT

EXTRAS = ("lab", "export", "trace")          # what environment.yml's header promises
CONDA_NAME = {"torch": "pytorch"}            # conda-forge's name for the same package
NOT_PACKAGES = {"python", "pip"}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pyproject_requirements() -> dict[str, SpecifierSet]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in EXTRAS:
        reqs += project["optional-dependencies"][extra]
    out = {}
    for text in reqs:
        r = Requirement(text)
        name = norm(CONDA_NAME.get(norm(r.name), r.name))
        # an extra may repeat a core name (export repeats lab's widgets): same specifier
        assert out.get(name, r.specifier) == r.specifier, f"{r.name}: two different pins"
        out[name] = r.specifier
    return out


def environment_requirements() -> tuple[dict[str, SpecifierSet], list[str]]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    out, pip_lines = {}, []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip_lines = [str(x) for x in dep["pip"]]
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(.*)", dep.strip())
        out[norm(m.group(1))] = SpecifierSet(m.group(2).replace(" ", ""))
    for line in pip_lines:
        if line.startswith("-e"):
            continue
        r = Requirement(line)
        out[norm(r.name)] = r.specifier
    return out, pip_lines


def test_environment_matches_pyproject():
    want = pyproject_requirements()
    have, _ = environment_requirements()
    for name in NOT_PACKAGES:
        have.pop(name, None)
    assert sorted(set(want) - set(have)) == [], "in pyproject, missing from environment.yml"
    assert sorted(set(have) - set(want)) == [], "in environment.yml, not declared in pyproject"
    for name, spec in want.items():
        assert have[name] == spec, f"{name}: pyproject says {spec}, environment.yml {have[name]}"


def test_environment_installs_this_project_and_its_python_range():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    _, pip_lines = environment_requirements()
    assert env["channels"] == ["conda-forge"]
    assert any(re.fullmatch(r"-e\s+\.(\[.*\])?", x) for x in pip_lines), pip_lines
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    low = SpecifierSet(project["requires-python"])
    assert all(v in SpecifierSet(python[len("python"):]) for v in ("3.10", "3.11", "3.12"))
    assert all(v in low for v in ("3.10", "3.11", "3.12"))


def test_readme_states_the_torch_range_pyproject_pins():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    torch = next(d for d in deps if Requirement(d).name == "torch")
    # the builds we test: 2.13 CPU here, 2.11+cu130 on the H200 host
    assert all(v in Requirement(torch).specifier for v in ("2.11.0", "2.13.0"))
    assert torch in (ROOT / "README.md").read_text(), f"README must state {torch}"
