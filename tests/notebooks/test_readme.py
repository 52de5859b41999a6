"""The README's Python as a first-time user pastes it, and every command it and its guide pages
(docs/*.md it links) show, run as written on this machine's CPU ranks (issue 26: its "In a
notebook" snippet once called lab.panel(cfg) with no cfg)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import ROOT

README = (ROOT / "README.md").read_text()

def python_blocks(text: str = README) -> list[tuple[str, str]]:
    """(the heading above it, its code) for every ```python block of the README (or text)."""
    out, heading = [], ""
    for m in re.finditer(r"^(#+ [^\n]*)$|^```python\n(.*?)^```", text, re.M | re.S):
        if m.group(1):
            heading = m.group(1).lstrip("#").strip()
        else:
            out.append((heading, m.group(2)))
    return out


def block(heading: str) -> str:
    found = [code for h, code in python_blocks() if h == heading]
    assert found, f"README has no python block under '{heading}'"
    return found[0]


def run_as_user(code: str, cwd: Path):
    """The code as a script in a fresh interpreter, in an empty folder (what it writes,
    history included, stays there)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    (cwd / "snippet.py").write_text(code)
    r = subprocess.run([sys.executable, "snippet.py"], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=1200)
    assert r.returncode == 0, (r.stdout[-2000:] + r.stderr[-4000:])
    return r


def test_every_python_block_of_the_readme_and_its_guide_pages_compiles():
    pages = {"README.md": README} | {f"docs/{p}.md": (ROOT / "docs" / f"{p}.md").read_text()
                                     for p in GUIDE_PAGES}
    blocks = [(name, h, code) for name, text in pages.items() for h, code in python_blocks(text)]
    assert len(blocks) >= 4, [(n, h) for n, h, _ in blocks]
    for name, heading, code in blocks:
        compile(code, f"{name} ({heading})", "exec")


@pytest.mark.parametrize("heading", ["In a notebook", "Your own model",
                                     "Traces of your own job"])
def test_every_name_a_snippet_uses_is_defined_in_it(heading):
    """Without running anything: each variable the snippet reads is assigned, imported or
    defined above that line (lab.panel(cfg) once read a cfg that no line made; "Your own
    model" used a MyNet it never defined)."""
    import ast
    import builtins
    tree = ast.parse(block(heading))
    defined = set(dir(builtins))
    for stmt in tree.body:
        # what the statement binds for itself: its targets, with/for names, arguments
        bound = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)
                 and isinstance(n.ctx, ast.Store)} | {n.arg for n in ast.walk(stmt)
                                                       if isinstance(n, ast.arg)}
        used = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        missing = used - defined - bound
        assert not missing, f"{heading}: line {stmt.lineno} reads {sorted(missing)} before any line sets it"
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            defined.add(stmt.name)        # its body's names are its own
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            defined |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
        else:
            defined |= bound


def test_the_readme_names_every_tutorial():
    """issue 44: its list stopped at 06 while 07-ask-the-lab shipped."""
    section = README[README.index("## Notebooks"):]
    section = section[:section.index("\n## ", 1)]
    stems = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert len(stems) >= 8, stems
    missing = [s for s in stems if f"`{s}`" not in section]
    assert not missing, f"README's Notebooks section does not name {missing}"


@pytest.mark.slow
def test_the_in_a_notebook_snippet_runs_as_written(tmp_path):
    r = run_as_user(block("In a notebook") + "\nprint('history', len(lab.history), "
                    "sum(len(c.runs_a or []) + len(c.runs_b or []) for c in ex.comparisons))\n", tmp_path)
    assert (tmp_path / "run.json").stat().st_size > 0        # run.to_perfetto("run.json")
    html = (tmp_path / "findings.html").read_text()
    assert "what I learned" in html
    # every run of the snippet is in the history folder Lab() wrote: lab.run's 1, lab.ab's
    # 5 rounds of 4, explore's start run and the A/Bs of whatever its advice was (on CPU,
    # often none; a round cut short is in the history but not in its comparison)
    n, explored = map(int, re.search(r"^history (\d+) (\d+)$", r.stdout, re.M).groups())
    assert n >= 1 + 20 + 1 + explored, r.stdout[-2000:]
    runs = [p for p in (tmp_path / "nbtools-runs").iterdir() if (p / "run.json").exists()]
    assert len(runs) == n, sorted(p.name for p in runs)


@pytest.mark.slow
def test_the_own_model_snippet_runs_as_written(tmp_path):
    """issue 44: it used a MyNet it never defined; now it runs pasted as it stands."""
    r = run_as_user(block("Your own model")
                    + "\nassert run.ok, run.errors\nprint('status', run.status)\nlab.close()\n",
                    tmp_path)
    assert "status ok" in r.stdout


@pytest.mark.slow
def test_the_traces_snippet_makes_traces_view_reads(tmp_path):
    """issue 44: `view traces/` needed traces the README never said how to get."""
    run_as_user(block("Traces of your own job"), tmp_path)
    made = list((tmp_path / "traces").glob("*.json"))
    assert len(made) == 1, made
    r = subprocess.run([sys.executable, "-m", "nbtools", "view", "traces/"], cwd=tmp_path,
                       env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    row = next(ln.split() for ln in r.stdout.splitlines() if ln.split()[:1] == ["0"])
    assert row[-1] == "ok" and float(row[1]) > 0, r.stdout      # its profiled step's window


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))


# Commands of the README's shell blocks that are not run here, and why: each would start a
# long-lived server or run a GPU-sized notebook (their own tests cover them).
NOT_RUN = {
    "python -m nbtools lab": "JupyterLab, a server that runs until stopped: tests/install/test_install.py",
    "python -m nbtools export": "a whole tutorial at its GPU sizes: tests/notebooks/test_notebooks.py",
}


# The pages the README hands its details to (issue 35: a short README, the rest in docs/):
# a command a person is shown there is run here as if the README showed it.
GUIDE_PAGES = ("install", "timeline", "ab", "notebooks", "cli", "clusters", "troubleshooting",
               "testing")


def shell_commands(text: str) -> list[str]:
    """Every `python -m nbtools ...` line of a page's shell blocks, comments cut."""
    out, fence = [], None
    for line in text.splitlines():
        if line.startswith("```"):
            fence = None if fence is not None else (line[3:].strip() or "shell")
            continue
        if fence in ("shell", "bash", "sh"):
            cmd = re.sub(r"\s+#.*", "", line).strip()
            cmd = re.sub(r"\s*\[[^\]]*\]", "", cmd)     # [OPTIONAL ARGS] of the synopsis
            if cmd.startswith("python -m nbtools"):
                out.append(cmd)
    return out


def readme_commands() -> list[str]:
    """The README's commands, then its guide pages', each once, in that order."""
    cmds = shell_commands(README)
    for page in GUIDE_PAGES:
        cmds += shell_commands((ROOT / "docs" / f"{page}.md").read_text())
    return list(dict.fromkeys(cmds))


def test_the_readme_links_every_guide_page_and_stays_short():
    """The README gets a person to a first timeline, an A/B and an export; the rest is one
    link away (issue 35: at most 250 lines)."""
    assert len(README.splitlines()) <= 250
    for page in GUIDE_PAGES:
        assert f"](docs/{page}.md)" in README, page
    quick = README[README.index("## Quickstart"):README.index("## Install")]
    block = quick[quick.index("```\n") + 4:quick.index("```", quick.index("```\n") + 4)]
    assert [ln.split("#")[0].strip() for ln in block.splitlines()] == [
        "python3 dev.py demo", "python3 dev.py test"]


def test_the_readme_shows_the_commands_this_test_runs():
    cmds = readme_commands()
    assert len(cmds) >= 12, cmds
    assert "python -m nbtools view" in cmds           # the demo's runs again
    assert "python -m nbtools --version" in cmds      # "Still stuck?"
    assert "python -m nbtools run --help" in cmds     # docs/cli.md


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_every_nbtools_command_of_the_readme_runs_as_written(tmp_path):
    """issue 34: after the quickstart (the venv active, so `python` is this interpreter),
    each command the README and its guide pages show, in their order, in one folder: `view` finds the
    runs the demo and `run` saved; the trace commands read the traces the README's own
    snippet makes in traces/, and a job's (the committed 2 x H200 ones) in before/ and
    after/."""
    import shutil
    from nbtools.common.package_data import h200_traces_dir
    src = h200_traces_dir()
    run_as_user(block("Traces of your own job"), tmp_path)      # traces/, as the README says
    for folder, mode in (("before", "off"), ("after", "reduce-overhead")):
        (tmp_path / folder).mkdir()
        for f in src.glob(f"tp_{mode}_rank*.json.gz"):
            shutil.copy(f, tmp_path / folder)
    env = _env()
    ran = []
    cmds = readme_commands()
    # the bare `view` reads what the demo saved: here, after every run and demo
    cmds = [c for c in cmds if c != "python -m nbtools view"] + ["python -m nbtools view"]
    for cmd in cmds:
        if any(cmd.startswith(k) for k in NOT_RUN):
            continue
        argv = [sys.executable] + cmd.split()[1:]
        argv = [a.strip("'\"") for a in argv]
        r = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=1200)
        assert r.returncode == 0, f"{cmd} -> {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        assert "Traceback" not in r.stderr, f"{cmd}\n{r.stderr[-3000:]}"
        ran.append(cmd)
        if cmd.split()[3:4] == ["demo"]:
            # issue 44: single runs that contradicted each other from one demo to the next,
            # and no verdict: it ends with an A/B's, and says why one run settles nothing
            tail = r.stdout.strip().splitlines()[-2:]
            assert tail[0].startswith("A/B verdict (step_ms, B over A, 95 % interval"), tail
            assert "one run cannot settle which config is faster" in tail[1], tail
        if cmd.split()[3:4] == ["view"] and cmd.split()[4:5] in ([], ["nbtools-runs"]):
            assert "no such history folder" not in r.stderr and r.stdout.strip(), cmd
    assert len(ran) >= 10, ran
    assert (tmp_path / "report.html").stat().st_size > 0       # demo --html report.html
    assert (tmp_path / "all.json").stat().st_size > 0          # view traces/ --perfetto all.json
