"""The API reference (docs/api) builds from the docstrings with Sphinx, warnings as errors, as
CI builds it: a docstring that docutils cannot read, a module autodoc cannot import, or an
object described twice fails here, naming the file and line. The pages then hold the
docstrings' text, their Google sections rendered."""
from __future__ import annotations

import html
import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import ROOT

API = ROOT / "docs" / "api"

pytestmark = pytest.mark.slow     # imports every module of the package: a minute on 2 cores


def page_text(path: Path) -> str:
    """A built page as a reader sees it: tags dropped, entities decoded, spaces collapsed."""
    text = re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8"))
    return " ".join(html.unescape(text).split())


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    if importlib.util.find_spec("sphinx") is None:
        pytest.fail("Sphinx is missing: install the docs extra (pip install -e '.[docs]'; "
                    "`python3 dev.py test` does)")
    out = tmp_path_factory.mktemp("api")
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q",
                        "-b", "html", str(API), str(out)], cwd=ROOT, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, f"sphinx-build failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    assert not r.stderr.strip(), f"sphinx-build said:\n{r.stderr[-6000:]}"
    return out


def test_every_page_is_built(built):
    for rst in API.glob("*.rst"):
        assert (built / f"{rst.stem}.html").is_file(), f"{rst.name} built no page"


def first_sentence(obj) -> str:
    return " ".join(inspect.getdoc(obj).split("\n\n")[0].split())


def test_the_public_names_page_holds_their_docstrings(built):
    from nbtools import Comparison, History, Lab, Run, StepConfig, Verdict
    text = page_text(built / "nbtools.html")
    for obj in (Lab, Lab.run, Lab.ab, Lab.panel, Run, Run.plot, StepConfig, StepConfig.replace,
                Verdict, History, History.load, Comparison):
        want = re.sub(r"``([^`]*)``", r"\1", first_sentence(obj))
        assert want in text, f"{obj.__qualname__}'s docstring is not on nbtools.html: {want!r}"
    # Google sections rendered as sections, and the examples as code
    run = text[text.index("Run one config on every rank"):]
    assert re.search(r"Parameters:.*fn_or_cfg.*Returns:.*Raises:.*ConfigError.*Example >>>", run)
    assert '>>> run = lab.run(StepConfig(scenario="tp-mlp-infer"' in run


def test_each_room_has_its_modules(built):
    text = page_text(built / "lab.html")
    for name in ("nbtools.lab.ab", "nbtools.lab.hosts", "nbtools.lab.sweeps"):
        assert name in text
    # a class documented with the public names is pointed to, not described twice
    assert "Documented with the public names" in text
