"""What a person meets in their first hour at the command line (issue 26): a one-config
`run` prints its table once; `export` says where it is while it runs, not at the end; the
client does not import torch to start a lab."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support.paths import ROOT

# a cell's bound on waiting for the test's go-ahead: a progress line that never arrives
# while the cell runs fails the export (the test then fails), it does not hang it
WAIT_S = 120


def _env():
    return dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))


@pytest.mark.slow
def test_a_one_config_run_prints_its_table_once(tmp_path):
    """The table under the run's own line is the whole story for one config; the summary
    table after the sweep (several configs) once repeated it row for row."""
    from nbtools.cli.table import format_table
    r = subprocess.run([sys.executable, "-m", "nbtools", "run", "--scenario", "tp-mlp-infer",
                        "--size", "small", "--warmup", "0", "--steps", "2", "--profiled", "0",
                        "--history", "h", "--quiet"],
                       cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    header = format_table([]).splitlines()[0].strip()
    lines = [line.strip() for line in r.stdout.splitlines()]
    assert lines.count(header) == 1, r.stdout
    assert sum(line.startswith("all ") for line in lines) == 1, r.stdout    # the run's own row
    assert sum(line.startswith("0 ") for line in lines) == 1, r.stdout      # rank 0's row
    assert "columns:" in r.stdout      # the legend, once, after it
    # two configs: each under its own line as it finishes, then the sweep's table
    assert r.stdout.count("-> ") == 1


def _notebook(path: Path, cells: list[str]) -> None:
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, str(path))


def _wait_for(name: str) -> str:
    return (f"import os, time\nt = time.monotonic()\nwhile not os.path.exists({name!r}):\n"
            f"    assert time.monotonic() - t < {WAIT_S}, 'no go-ahead: the progress line "
            f"did not reach the test while this cell ran'\n    time.sleep(0.05)\n")


@pytest.mark.slow
def test_export_says_where_it_is_while_it_runs(tmp_path):
    """Causal, not timed: a cell waits for a file the test writes only once it has read
    that cell's progress line from the running export (a start line per cell; the lab
    run's phase line while the run runs). Lines held back until the end would leave the
    cell waiting, and the export would fail."""
    go_cell, go_run = str(tmp_path / "go-cell"), str(tmp_path / "go-run")
    step = (
        "from nbtools import Lab, StepConfig\n"
        "lab = Lab(history=None)\n"
        "def step(ctx):\n"
        "    if ctx.rank == 0:\n"
        + "".join("        " + line + "\n" for line in _wait_for(go_run).splitlines())
        + "run = lab.run(step, StepConfig(warmup=0, steps=1, profiled=0))\n"
        "print('run', run.status)\nlab.close()\n")
    _notebook(tmp_path / "nb.ipynb", ["print('first cell')", _wait_for(go_cell), step])
    proc = subprocess.Popen([sys.executable, "-m", "nbtools", "export", "nb.ipynb", "-o",
                             "nb.html"], cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)     # the lines: stderr, read by one reader
    seen, said = [], {}

    def read():
        for line in proc.stderr:
            seen.append(line.rstrip())
            if line.startswith("cell 1 (") and "go-cell" not in said:
                said["go-cell"] = len(seen)
                Path(go_cell).touch()
            if line.startswith("  cell 2: run ") and "go-run" not in said:
                said["go-run"] = len(seen)
                Path(go_run).touch()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(10)
    assert proc.returncode == 0, "\n".join(seen[-40:])
    assert set(said) == {"go-cell", "go-run"}, "\n".join(seen)
    # the lines came in order: the first cell's start, the waiting cell's, the run's phase
    starts = {int(m.group(1)): i for i, line in enumerate(seen)
              for m in [re.match(r"cell (\d+) \(\d+/3 code cells, ", line)] if m}
    assert sorted(starts) == [0, 1, 2], "\n".join(seen)
    assert starts[1] < said["go-cell"] <= starts[2] < said["go-run"], "\n".join(seen)
    html = (tmp_path / "nb.html").read_text()
    assert "run ok" in html


@pytest.mark.slow
def test_the_client_never_imports_torch_to_start_a_lab_and_run(tmp_path):
    """What the engines send back is plain data: a torch.__version__ (TorchVersion) in the
    engines' info once made the notebook import torch while Lab() started (a second or
    more of it, issue 26), and a run's env did it again on the first run."""
    code = ("import sys\nfrom nbtools import Lab, StepConfig\n"
            "with Lab(history=None) as lab:\n"
            "    assert 'torch' not in sys.modules, 'Lab() imported torch'\n"
            "    run = lab.run(StepConfig(warmup=0, steps=1, profiled=0))\n"
            "    assert run.ok and isinstance(run.env['torch'], str)\n"
            "    assert 'torch' not in sys.modules, 'a run imported torch'\n"
            "print('no torch here')\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "no torch here" in r.stdout, r.stderr[-3000:]


def _dev():
    import importlib.util
    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    return dev


def test_dev_py_tells_the_fast_tier_from_the_full_run():
    """issue 34: the fast tier apt-installed sshd, Slurm, munge and OpenMPI though no fast
    test uses them; only a run that includes the slow tests installs Debian's packages."""
    dev = _dev()
    for args in (["-m", "not slow"], ["-q", "-m", "not slow and not gpu"], ["-mnot slow"],
                 ["-m=not slow", "tests/cli/test_cli.py"]):
        assert dev.fast_tier(args), args
    for args in ([], ["-q"], ["-m", "slow"], ["tests/cli/test_cli.py", "-k", "not slow"]):
        assert not dev.fast_tier(args), args


def test_dev_py_checks_the_imports_quietly_and_says_all_when_one_breaks(tmp_path, capfd):
    """issue 44: every test run began with import-linter's banner and its list of kept
    contracts. Kept: nothing printed. Broken: its whole report, and the run stops."""
    dev = _dev()
    lint = Path(sys.executable).parent / "lint-imports"
    assert dev.check_imports(lint, ROOT / ".importlinter") == 0
    out = capfd.readouterr()
    assert out.out == "" and out.err == "", out
    broken = tmp_path / "broken.importlinter"
    broken.write_text("[importlinter]\nroot_package = nbtools\n\n"
                      "[importlinter:contract:x]\nname = the cli never imports config\n"
                      "type = forbidden\nsource_modules =\n    nbtools.cli\n"
                      "forbidden_modules =\n    nbtools.config\n")
    assert dev.check_imports(lint, broken) != 0
    said = capfd.readouterr().out
    assert "the cli never imports config BROKEN" in said and "nbtools.cli" in said, said


def test_dev_py_reads_the_accepted_torch_range_from_pyproject():
    """One place for the range (issue 34: the newest releases were refused)."""
    dev = _dev()
    assert dev.MIN_TORCH == (2, 11) and dev.TORCH_BELOW == (2, 16)
    assert all(dev.MIN_TORCH <= (2, minor) < dev.TORCH_BELOW for minor in range(11, 16))
    text = (ROOT / "README.md").read_text()
    assert "**torch>=2.11,<2.16**" in text
    # the README's torch commands pin a tested version
    for cmd in re.findall(r"pip install torch[^`]*", text):
        assert re.match(r"pip install torch==2\.1[13]\.0 --index-url https://download\.pytorch"
                        r"\.org/whl/(cpu|cu130)", " ".join(cmd.split())), cmd


def test_the_demo_ends_saying_how_to_run_what_dev_py_made():
    """issue 34: after `python3 dev.py demo`, `python3 -m nbtools` failed (nbtools is in
    .venv); the demo's last lines say so and where its runs are."""
    dev = _dev()
    text = dev.next_steps()
    venv = os.path.relpath(dev.VENV) if not os.path.relpath(dev.VENV).startswith("..") else str(dev.VENV)
    assert f"{venv}/bin/python -m nbtools" in text and f". {venv}/bin/activate" in text
    assert "-m nbtools view " in text and "nbtools-runs" in text
