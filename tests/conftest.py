"""Test-session rules that hold whatever ``-m`` says."""
from __future__ import annotations

import os
import signal

import pytest
from hypothesis import settings

# A shell starts a background job (`cmd &` without job control) with SIGINT ignored, and
# every process below inherits that: the tests that press Ctrl-C (SIGINT to this process,
# to a lab's client, to JupyterLab) would find it ignored. Ctrl-C acts as in a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Property tests explore new examples on every local run (that is how the parts test found a
# CPU rank's op on a GPU lane counted in compute but not in the span); in CI (.ci/run sets
# CI) they draw the same examples every time, so a landing never hangs on a new draw.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# Every lab of a test run keeps its inductor caches in one folder ($NBTOOLS_COMPILE_CACHE,
# the default of Lab(compile_cache=)): a lab compiling from nothing is C++ builds and
# inductor's lowering again for graphs an earlier lab built, a third of a CLI test's CPU
# (docs/benchmarks.md, "Session 19"). Set before the workers start, so they, the notebooks'
# kernels and the CLI's processes inherit it; a test about cold compiles gives its lab a
# folder of its own. A person's own setting is kept.
_MADE_CACHE = None


def pytest_configure(config):
    global _MADE_CACHE
    if os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get("NBTOOLS_COMPILE_CACHE"):
        return
    import tempfile
    _MADE_CACHE = tempfile.mkdtemp(prefix="nbtools-tests-inductor-")
    os.environ["NBTOOLS_COMPILE_CACHE"] = _MADE_CACHE


def pytest_sessionfinish(session, exitstatus):
    """The JupyterLab and the Chromium the browser tests of this process shared
    (support/jupyter.py, support/browser.py: one each per worker) end with the session,
    JupyterLab's kernels first."""
    import sys
    jupyter = sys.modules.get("support.jupyter")
    if jupyter is not None:
        left = jupyter.stop_shared()
        if left:
            print(f"\nthe shared JupyterLab's processes had to be killed: {left}")
    browser = sys.modules.get("support.browser")
    if browser is not None:
        browser.stop_shared()


def pytest_unconfigure(config):
    if _MADE_CACHE:
        import shutil
        shutil.rmtree(_MADE_CACHE, ignore_errors=True)


# Fixtures that start a Lab (engines, a controller, a process group: seconds each, and the
# tests on them run real steps): a test using one is in the slow tier without saying so,
# so a new test on a lab cannot slip into the inner loop's three minutes.
LAB_FIXTURES = {"lab", "pair"}
# A test that drives Chromium (tests/support/browser.py) needs Debian's chromium, installed
# system-wide: the fast tier installs nothing system-wide (issue 34), so such a test is in
# the slow tier (the full run, CI's, installs chromium and runs it; it never skips).
BROWSER_CALLS = {"launch", "_launch", "open_page", "serve"}


def _drives_a_browser(item) -> bool:
    code = getattr(getattr(item, "function", None), "__code__", None)
    return code is not None and bool(BROWSER_CALLS & set(code.co_names))


# The full run (dev.py test) runs on two pytest-xdist workers, one module per worker at a
# time (--dist loadfile): these modules go out first, longest first, so that the last
# module a worker takes is a short one (measured: docs/benchmarks.md, "The full suite";
# benchmarks/suite/summary.py prints the order from a profile). The rest keep file order.
LONGEST_FIRST = [
    "test_notebooks.py", "test_jupyterlab.py", "test_hosts.py", "test_readme.py",
    "test_lab_compile.py", "test_faults.py", "test_ab.py", "test_extras_install.py",
    "test_notebook_document.py", "test_browser_panel_compare.py", "test_lab.py", "test_cli.py",
    "test_explore.py", "test_panel.py", "test_install.py", "test_workload.py", "test_flags.py",
    "test_panel_compare.py", "test_browser_panel_advice.py",
    "test_advice_lab.py", "test_first_hour.py",
]


def _module_rank(item) -> int:
    name = item.nodeid.split("::")[0].rsplit("/", 1)[-1]
    return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_module_rank)          # stable: a module's own order is kept
    for item in items:
        if LAB_FIXTURES & set(getattr(item, "fixturenames", ())) or _drives_a_browser(item):
            item.add_marker(pytest.mark.slow)
    # GPU tests need a CUDA device: without one they are deselected (not skipped: a skip would
    # read as a result), also when ``-m "not slow"`` replaces the default marker expression.
    # ``pytest -m gpu`` on a GPU host runs them; there, a missing device is their own failure.
    if "gpu" in (config.getoption("markexpr") or "").replace("not gpu", ""):
        return
    gpu = [i for i in items if i.get_closest_marker("gpu")]
    if gpu:
        config.hook.pytest_deselected(items=gpu)
        items[:] = [i for i in items if not i.get_closest_marker("gpu")]


# What a module sets as ``LAB`` to run on the worker's shared lab instead of one of its own.
SHARED = "shared"
# The shared lab's options: the longest timeouts any sharing module asked for.
SHARED_OPTIONS = dict(timeout=600, pg_timeout=300)


@pytest.fixture(scope="session")
def shared_lab(tmp_path_factory):
    """One 2-rank CPU lab per test process (each xdist worker has its own), for the modules
    whose tests count history relative to where they start and run configs of their own:
    they do not need a lab of their own, and each lab start is ~12 s of CPU on 2 cores
    (docs/benchmarks.md, "Session 17")."""
    from nbtools import Lab
    with Lab(n=2, history=tmp_path_factory.mktemp("shared-history"), **SHARED_OPTIONS) as lab:
        _on_engines(lab, _KEEP_DYNAMO_CONFIG)
        yield lab


# A module's runs can change process-wide state on the shared lab's engines and so the next
# module's results: tests/support/explore_steps.py's Net raises Dynamo's recompile limits, as a
# person's model may, and test_advice_lab then hit no limit (CI's failure of session 17).
# Each sharing module gets Dynamo's config back as the shared lab started with it. Run on
# the engines as source (execute, then pull): a function of this file would travel by
# reference to a module the engines cannot import. Both wait for the engine's background
# import first, as a run does: two threads importing torch._dynamo at once can deadlock.
_WARM = "from nbtools.engine.state import S\nS.finish_warm_import()\n"
_KEEP_DYNAMO_CONFIG = _WARM + """
import torch._dynamo
torch._dynamo._nbtools_tests_config = torch._dynamo.config.get_config_copy()
_nbtools_tests_changed = []
"""
_RESTORE_DYNAMO_CONFIG = _WARM + """
import torch._dynamo
def _nbtools_tests_restore():
    cfg = torch._dynamo.config
    kept = getattr(torch._dynamo, "_nbtools_tests_config", None)
    if kept is None:          # an engine that joined later: what it has now is its start
        torch._dynamo._nbtools_tests_config = cfg.get_config_copy()
        return []
    now, changed = cfg.get_config_copy(), []
    for name, value in kept.items():
        try:
            same = bool(now.get(name) == value)
        except Exception:     # a value whose == is not a bool
            same = now.get(name) is value
        if not same:
            setattr(cfg, name, value)
            changed.append(name)
    return changed
_nbtools_tests_changed = _nbtools_tests_restore()
"""


def _on_engines(lab, code: str) -> dict:
    """Run ``code`` on every rank's engine; each rank's ``_nbtools_tests_changed``."""
    out = {}
    for rank, eid in sorted(lab.rank_to_engine.items()):
        view = lab.client[eid]
        view.execute(code, block=True)
        out[rank] = view.pull("_nbtools_tests_changed", block=True)
    return out


@pytest.fixture(scope="module")
def lab(request, tmp_path_factory):
    """The 2-rank CPU lab of one test module. A module sets ``LAB = SHARED`` to run on its
    worker's shared lab (its tests must not depend on a fresh lab: a fixed history length,
    a first run that builds, the panel opening on the newest run, killing ranks), or
    ``LAB = dict(...)`` for a lab of its own with these defaults changed (``history=None``,
    ``echo=False``, other timeouts); without ``LAB`` it gets a lab of its own."""
    wanted = getattr(request.module, "LAB", {})
    if wanted == SHARED:
        shared = request.getfixturevalue("shared_lab")
        yield shared
        try:
            changed = _on_engines(shared, _RESTORE_DYNAMO_CONFIG)
        except Exception as e:   # noqa: BLE001 - a broken shared lab: its next user says so
            changed = {"not restored": repr(e)}
        if any(changed.values()):    # with -s: which module changed what
            print(f"\n{request.module.__name__} changed torch._dynamo.config on the shared "
                  f"lab's engines, restored: {changed}")
        return
    from nbtools import Lab
    options = dict(n=2, history=tmp_path_factory.mktemp("history"), timeout=240,
                   pg_timeout=120)
    options.update(wanted)
    with Lab(**options) as lab:
        yield lab
