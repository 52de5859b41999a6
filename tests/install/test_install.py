"""The package outside the repository: a wheel built from a clean clone, installed into a
fresh venv and run from an unrelated folder; and `nbtools lab` serving a clone.

The fresh venv gets nbtools only from the wheel. Its third-party dependencies (torch,
ipyparallel, jupyterlab, ...) are those of the interpreter running the tests, made visible
through a .pth file, as --system-site-packages would for a system Python, so the test needs
no network; `pip check` then confirms the wheel's declared requirements are met."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
from support.install import clean_env, setuptools_ok, sh
from support.paths import ROOT

SHIPPED_NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
SPEC = json.loads((ROOT / "kernels" / "torch-nbtools" / "kernel.json").read_text())

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    assert (ROOT / ".git").exists(), f"{ROOT} is not a git checkout: the test clones it"
    clone = tmp / "clone"
    sh("git", "clone", "-q", ROOT, clone)
    isolation = [] if not setuptools_ok() else ["--no-build-isolation"]
    sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, clone,
       "-w", tmp / "dist", env=clean_env())
    wheel, = (tmp / "dist").glob("torch_nbtools-*.whl")
    venv = tmp / "venv"
    sh(sys.executable, "-m", "venv", "--without-pip", venv)
    py = venv / "bin" / "python"
    site = Path(sh(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
                .stdout.strip())
    outer = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    (site / "_test_dependencies.pth").write_text("\n".join(outer) + "\n")
    pip = [sys.executable, "-m", "pip", "--python", py]
    sh(*pip, "install", "-q", "--no-deps", "--no-index", wheel, env=clean_env())
    check = subprocess.run([*pip, "check"], capture_output=True, text=True, env=clean_env())
    ours = [line for line in check.stdout.splitlines() if line.lower().startswith("torch-nbtools")]
    assert ours == [], ours
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    (tmp / "home").mkdir()
    return dict(wheel=wheel, py=py, venv=venv, site=site, cwd=elsewhere,
                env=clean_env(JUPYTER_CONFIG_DIR=str(tmp / "jcfg"),
                              JUPYTER_DATA_DIR=str(tmp / "jdata"),
                              JUPYTER_RUNTIME_DIR=str(tmp / "jrun"), HOME=str(tmp / "home")))


def run_nbtools(inst, *args, timeout=300):
    return sh(inst["py"], "-m", "nbtools", *args, cwd=inst["cwd"], env=inst["env"],
              timeout=timeout)


def test_wheel_holds_the_package_data_and_licence(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    nbs = sorted(Path(n).name for n in names if n.startswith("nbtools/notebooks/"))
    assert nbs == SHIPPED_NOTEBOOKS and len(nbs) >= 6
    assert "nbtools/kernels/torch-nbtools/kernel.json" in names
    assert "nbtools/docs/findings.md" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not any(n.startswith("tests/") for n in names)
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(installed["wheel"]).read(meta).decode()
    assert "License-Expression: BSD-3-Clause" in text
    assert "Provides-Extra: lab" in text and "Provides-Extra: export" in text
    # the JupyterLab extension and its server side, installed and enabled with the wheel
    data = "torch_nbtools-" + installed["wheel"].name.split("-")[1] + ".data/data/"
    for path in ("share/jupyter/labextensions/torch-nbtools/package.json",
                 "share/jupyter/labextensions/torch-nbtools/static/remoteEntry.js",
                 "etc/jupyter/jupyter_server_config.d/torch-nbtools.json"):
        assert data + path in names, path
        assert (installed["venv"] / path).is_file(), f"{path} not installed"


def test_installed_version_comes_from_the_wheel(installed):
    import nbtools
    out = run_nbtools(installed, "--version").stdout
    assert out.startswith(f"torch-nbtools {nbtools.__version__} ")
    where = sh(installed["py"], "-c", "import nbtools; print(nbtools.__file__)",
               cwd=installed["cwd"], env=installed["env"]).stdout.strip()
    assert Path(where).is_relative_to(installed["site"])


def test_installed_notebooks_copies_the_tutorials(installed):
    out = run_nbtools(installed, "notebooks", "tut").stdout
    got = sorted(p.name for p in (installed["cwd"] / "tut").glob("*.ipynb"))
    assert got == SHIPPED_NOTEBOOKS and len(got) >= 6
    assert f"{len(got)} tutorial notebooks in" in out
    assert (installed["cwd"] / "tut" / "docs" / "findings.md").exists()
    # the docs link only to what the package carries (the recorded HTML reports stay in
    # the repository: their links say so instead)
    for doc in (installed["cwd"] / "tut" / "docs").glob("*.md"):
        text = doc.read_text()
        for link in re.findall(r"\]\(((?!https?:|#|mailto:)[^)\s#]+)", text):
            assert (doc.parent / link).exists(), (doc.name, link)


def test_installed_export_right_after_install(installed):
    """`pip install` then `nbtools export`, no other step: the torch-nbtools kernel is
    registered on first use for this interpreter, and the terminal shows our progress, not
    ipykernel's TCP warning."""
    import nbformat
    shutil.rmtree(installed["venv"] / "share/jupyter/kernels", ignore_errors=True)  # as installed
    cell = nbformat.v4.new_code_cell("import sys, nbtools; print(sys.executable, nbtools.__file__)")
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb.metadata["kernelspec"] = {"name": "torch-nbtools", "display_name": "torch-nbtools",
                                 "language": "python"}
    path = installed["cwd"] / "first.ipynb"
    nbformat.write(nb, str(path))
    # nbconvert's templates are data files of the environment that installed it (this
    # interpreter's, made visible by the .pth): where a real install of [export] puts them
    # (only those: that folder also holds a torch-nbtools kernel for this interpreter)
    jpath = installed["cwd"].parent / "jpath"
    jpath.mkdir(exist_ok=True)
    if not (jpath / "nbconvert").exists():
        (jpath / "nbconvert").symlink_to(Path(sys.prefix) / "share" / "jupyter" / "nbconvert")
    env = dict(installed["env"], JUPYTER_PATH=str(jpath))
    inst = dict(installed, env=env)
    r = run_nbtools(inst, "export", path.name, "--save-ipynb", "first.out.ipynb")
    assert f"installed the torch-nbtools kernel in {installed['venv']}" in r.stderr, r.stderr
    assert "without encryption" not in r.stderr and "NoSuchKernel" not in r.stderr, r.stderr
    out = nbformat.read(str(installed["cwd"] / "first.out.ipynb"), as_version=4)
    exe, where = out.cells[0].outputs[0]["text"].split()
    assert exe == str(installed["py"]) and Path(where).is_relative_to(installed["site"])
    assert (installed["cwd"] / "first.html").exists()
    again = run_nbtools(inst, "export", path.name)      # known now: nothing installed
    assert "installed the torch-nbtools kernel" not in again.stderr, again.stderr


def test_installed_kernel_install_writes_the_shipped_spec(installed):
    run_nbtools(installed, "kernel", "install", "--sys-prefix")
    spec = json.loads((installed["venv"] / "share/jupyter/kernels/torch-nbtools/kernel.json")
                      .read_text())
    assert spec["argv"] == [str(installed["py"])] + SPEC["argv"][1:]
    assert {k: v for k, v in spec.items() if k != "argv"} == \
        {k: v for k, v in SPEC.items() if k != "argv"}


ADVICE = "from nbtools.common.extras import install_command as c; print(c('lab', 'export'))"


def test_missing_extra_advice_names_the_wheel_it_was_installed_from(installed):
    """issue 34: the advice once named the index, where nothing is published; from a wheel
    it is that wheel's path with the extras, for this venv's python."""
    out = sh(installed["py"], "-c", ADVICE, cwd=installed["cwd"], env=installed["env"]).stdout
    assert out.strip() == f"{installed['py']} -m pip install '{installed['wheel']}[export,lab]'"


def test_missing_extra_advice_names_the_index_when_it_came_from_one(installed, tmp_path):
    """Installed by name from an index (here a local one: --find-links), pip records no
    direct URL, and the advice is the package's name."""
    venv = tmp_path / "venv"
    sh(sys.executable, "-m", "venv", "--without-pip", venv)
    py = venv / "bin" / "python"
    site = Path(sh(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
                .stdout.strip())
    (site / "_test_dependencies.pth").write_text((installed["site"] / "_test_dependencies.pth").read_text())
    # --ignore-installed: the outer environment's editable install would count as installed
    sh(sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--no-index",
       "--ignore-installed", "--find-links", installed["wheel"].parent, "torch-nbtools",
       env=clean_env())
    out = sh(py, "-c", ADVICE, cwd=installed["cwd"], env=installed["env"]).stdout
    assert out.strip() == f"{py} -m pip install 'torch-nbtools[export,lab]'"


def test_installed_lab_help(installed):
    out = run_nbtools(installed, "lab", "--help").stdout
    assert out.startswith("usage: python -m nbtools lab") and "--no-browser" in out


def test_installed_lab_serves_a_copy_of_the_tutorials(installed, monkeypatch):
    with serving(installed["py"], installed["cwd"], installed["env"]) as (base, token, log, pid):
        root = installed["cwd"] / "nbtools-notebooks"
        assert sorted(p.name for p in root.glob("*.ipynb")) == SHIPPED_NOTEBOOKS
        assert get(base, token, "/api/contents/00-quickstart.ipynb?content=0")["type"] == "notebook"
        assert get(base, token, "/api/contents/docs/findings.md?content=0")["type"] == "file"
        specs = get(base, token, "/api/kernelspecs")["kernelspecs"]
        assert specs["torch-nbtools"]["spec"]["argv"][0] == str(installed["py"])
        assert landing(base, token).endswith("/lab/tree/00-quickstart.ipynb")
        # the panel's link to a tlparse report under the served folder: the server's URL
        from nbtools.results.torch_trace import served_href
        page = root / "nbtools-runs/0000-cafe/torch_trace/tlparse/index.html"
        page.parent.mkdir(parents=True)
        page.write_text("<h1>Multi-Rank TLParse Report</h1>")
        monkeypatch.setenv("JUPYTER_RUNTIME_DIR", installed["env"]["JUPYTER_RUNTIME_DIR"])
        href = served_href(page, server_pid=pid)
        assert href == "/files/nbtools-runs/0000-cafe/torch_trace/tlparse/index.html"
        req = urllib.request.Request(base + href, headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert b"Multi-Rank TLParse Report" in r.read()
        assert served_href(page, server_pid=pid + 1) is None     # not our server


def test_lab_as_root_passes_allow_root_and_says_so(tmp_path):
    """GPU containers often run as root, where jupyter lab stops ("Running as root is not
    recommended"): `nbtools lab` starts anyway, with one line saying it passed --allow-root
    (not root: nothing said, nothing passed)."""
    env = clean_env(PYTHONPATH=str(ROOT), JUPYTER_RUNTIME_DIR=str(tmp_path / "jrun"))
    with serving(sys.executable, tmp_path, env, allow_root=False) as (base, token, log, pid):
        assert get(base, token, "/api/status")["started"]
        said = "running as root: passing --allow-root to jupyter lab" in log()
        assert said == (os.geteuid() == 0), log()[-2000:]


def test_lab_from_a_clone_serves_the_repository(tmp_path):
    env = clean_env(PYTHONPATH=str(ROOT), JUPYTER_RUNTIME_DIR=str(tmp_path / "jrun"))
    with serving(sys.executable, tmp_path, env) as (base, token, log, pid):
        assert get(base, token, "/api/contents/notebooks/00-quickstart.ipynb?content=0")["type"] == "notebook"
        # notebook 01 links ../docs/findings.md: inside the served folder
        assert get(base, token, "/api/contents/docs/findings.md?content=0")["type"] == "file"
        assert landing(base, token).endswith("/lab/tree/notebooks/00-quickstart.ipynb")
        assert f"serving the clone at {ROOT}" in log()


# -- a running `nbtools lab` -----------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(python, cwd, env, allow_root=True):
    """`python -m nbtools lab --no-browser ...` until its API answers; stopped after.
    ``allow_root=False``: no --allow-root from us, as a person types it."""
    port, token = free_port(), "nbtools-test-token"
    logf = open(Path(cwd) / f"lab-{port}.log", "w+")
    proc = subprocess.Popen([str(python), "-m", "nbtools", "lab", "--no-browser",
                             f"--port={port}", "--ip=127.0.0.1",
                             f"--IdentityProvider.token={token}",
                             # options pass straight through to jupyter lab
                             *(["--allow-root"] if allow_root and hasattr(os, "geteuid")
                               and os.geteuid() == 0 else [])],
                            cwd=cwd, env=env, stdout=logf, stderr=subprocess.STDOUT)

    def log():
        logf.flush()
        logf.seek(0)
        return logf.read()

    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, f"nbtools lab exited {proc.returncode}:\n{log()[-3000:]}"
            try:
                get(base, token, "/api/status")
                break
            except OSError:
                assert time.monotonic() < deadline, f"lab did not answer:\n{log()[-3000:]}"
                time.sleep(0.5)
        yield base, token, log, proc.pid
    finally:
        proc.terminate()          # `nbtools lab` became jupyter (exec): this stops the server
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        logf.close()


def get(base, token, path):
    req = urllib.request.Request(base + path, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def landing(base, token) -> str:
    """Where the server's front page sends a browser (the default URL)."""
    with urllib.request.urlopen(f"{base}/?token={token}", timeout=30) as r:
        return r.geturl().split("?")[0]


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_lab_stops_on_a_signal_and_leaves_no_child(tmp_path, sig):
    """`nbtools lab` becomes jupyter lab (exec), so SIGTERM, and Ctrl-C's SIGINT, reach
    JupyterLab itself: it stops, and no process it started (a notebook kernel) is left."""
    import psutil
    import signal
    env = clean_env(PYTHONPATH=str(ROOT), JUPYTER_RUNTIME_DIR=str(tmp_path / "jrun"))
    with serving(sys.executable, tmp_path, env) as (base, token, log, pid):
        server = psutil.Process(pid)
        assert "jupyterlab" in " ".join(server.cmdline()), server.cmdline()   # no wrapper
        req = urllib.request.Request(base + "/api/kernels", method="POST",
                                     data=json.dumps({"name": "python3"}).encode(),
                                     headers={"Authorization": f"token {token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            assert json.loads(r.read())["id"]
        deadline = time.monotonic() + 60
        while not server.children(recursive=True):
            assert time.monotonic() < deadline, "the kernel never started"
            time.sleep(0.5)
        kids = server.children(recursive=True)
        os.kill(pid, getattr(signal, sig))
        _, alive = psutil.wait_procs([server], timeout=60)
        assert not alive, f"jupyter lab still running 60 s after {sig}:\n{log()[-2000:]}"
        _, alive = psutil.wait_procs(kids, timeout=30)
        assert not alive, f"left running after {sig}: {[k.cmdline()[:3] for k in alive]}"
