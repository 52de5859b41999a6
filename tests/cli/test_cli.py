"""The command line explains itself: field help from config.py, `--parallel none`,
`--version`, one-line errors for bad input, the table's legend, and the tutorial copier."""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import nbtools
from nbtools.config import step_config as config
from nbtools.cli.main import TABLE_LEGEND, build_parser, format_table, main, sweep
from nbtools.config.field_docs import OPTIONAL
from nbtools.cli.tutorials import copy_tutorials
from nbtools.report.page import unpacked
from support.paths import ROOT



def nbtools_cli(*args, cwd=None, pre=""):
    """`python -m nbtools ARGS` in a child, as a person runs it."""
    code = f"import sys; {pre}from nbtools.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def cli_here(args, cwd, capsys, monkeypatch):
    """(exit code, stdout, stderr) of the CLI's ``main`` called in this process from ``cwd``:
    the same code as `python -m nbtools`, without a child's 2-3 s of imports (what a fresh
    process prints at start-up is test_bad_input_in_a_fresh_process_is_one_line's)."""
    monkeypatch.chdir(cwd)
    try:
        code = main([str(a) for a in args])
    except SystemExit as e:            # argparse's errors
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def config_docs() -> dict:
    """The docstring under each StepConfig field, read here with a plain walk of the class."""
    tree = ast.parse((Path(config.__file__)).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "StepConfig")
    docs, last = {}, None
    for node in cls.body:
        if isinstance(node, ast.AnnAssign):
            last = node.target.id
        elif last and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            docs[last], last = node.value.value, None
    return docs


def words(text: str) -> str:
    return " ".join(text.replace("``", "`").split())


def test_each_field_flag_shows_its_doc_and_values(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "--help"])
    assert e.value.code == 0
    out = words(capsys.readouterr().out)
    out = out[out.index("config fields"):]        # past the usage line
    docs = config_docs()
    assert len(docs) == len(config.StepConfig.__dataclass_fields__) >= 20
    for name, doc in docs.items():
        flag = f"--{name.replace('_', '-')}"
        assert flag in out
        section = out[out.index(flag + " V[,V...]"):]
        if name in OPTIONAL:     # None is spelled `default` on the command line (issue 34)
            assert "None" in doc and "None" not in section.split(" --")[0], name
            doc = re.sub(r"\bNone\b", "default", doc)
        assert section.split(" --")[0].count(words(doc)[:60]) == 1, name
    # allowed values, from the tuples config.py checks against
    for flag, values in (("--compile", config.COMPILE_MODES), ("--parallel", config.PARALLEL),
                         ("--backend", config.BACKENDS), ("--capture", config.CAPTURE)):
        section = out[out.index(flag + " V[,V...]"):].split(" --")[0]
        assert all(v in section for v in values), (flag, section)
    assert "comma-separated" in out


def test_parallel_none_is_the_none_strategy():
    cfgs = sweep({"parallel": "none,default,tp"})
    assert [c.parallel for c in cfgs] == ["none", None, "tp"]
    assert [c.resolved_parallel for c in cfgs] == ["none", "tp", "tp"]
    assert [c.batch for c in sweep({"batch": "default,4"})] == [None, 4]


def test_version():
    r = nbtools_cli("--version")
    assert r.returncode == 0 and r.stdout.startswith(f"torch-nbtools {nbtools.__version__} ")


@pytest.mark.parametrize("args,says", [
    (["export", "missing.ipynb"], "missing.ipynb: no such notebook"),
    (["export", "bad.ipynb"], "bad.ipynb: not a notebook"),
    (["export", "wrong.ipynb"], "wrong.ipynb: not a valid notebook"),
    (["export", "."], "is a folder, not a notebook"),
    (["view", "bad.ipynb"], "is a file, not a history folder or trace file (.json, .json.gz)"),
    (["view", "no-such-runs"], "no-such-runs: no such history folder or trace file"),
    # a trace file that is not one: what is wrong with it, no traceback
    (["view", "bad.json"], "bad.json: is not valid JSON"),
    (["notebooks", "bad.ipynb"], "is a file, not a notebooks folder"),
    (["run", "--history", "bad.ipynb"], "is a file, not a history folder"),
    (["run", "--html", "nowhere/report.html"], "folder nowhere does not exist"),
    (["run", "--parallel", "sideways"], "parallel='sideways' is not one of"),
    # the default scenario's rules, before any engine starts
    (["run", "--parallel", "ddp"], "StepConfig's default scenario"),
    # README: -p on a notebook that cannot take it is one line, exit 2
    (["export", "params.ipynb", "-p", "NOPE=1"], "-p: NOPE: not set in the notebook's parameters cell (it sets SMALL, STEPS)"),
    (["export", "plain.ipynb", "-p", "SMALL=True"], "-p: the notebook has no cell tagged 'parameters'"),
], ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_bad_input_is_one_line_and_a_nonzero_exit(tmp_path, args, says, capsys, monkeypatch):
    _bad_inputs(tmp_path)
    code, _, err = cli_here(args, tmp_path, capsys, monkeypatch)
    assert code == 2
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert says in err


def test_bad_input_in_a_fresh_process_is_one_line(tmp_path):
    # as a person runs it: nothing the imports of a new process print joins the line
    _bad_inputs(tmp_path)
    for args, says in ((["view", "bad.json"], "bad.json: is not valid JSON"),
                       (["run", "--parallel", "sideways"], "parallel='sideways' is not one of")):
        r = nbtools_cli(*args, cwd=tmp_path)
        assert r.returncode == 2
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert says in r.stderr


def _bad_inputs(tmp_path) -> None:
    import nbformat
    (tmp_path / "bad.ipynb").write_text('{"cells": [')
    (tmp_path / "bad.json").write_text('{"traceEvents": [{"ph": "X", ')
    (tmp_path / "wrong.ipynb").write_text('{"cells": 3}')
    params = nbformat.v4.new_code_cell("SMALL = False\nSTEPS: int = 10")
    params.metadata["tags"] = ["parameters"]
    nbformat.write(nbformat.v4.new_notebook(cells=[params]), str(tmp_path / "params.ipynb"))
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]),
                   str(tmp_path / "plain.ipynb"))


def _subparsers():
    import argparse
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


@pytest.mark.parametrize("cmd", ["run", "demo", "view", "notebooks", "kernel", "export"])
def test_every_option_of_each_command_says_what_it_does_and_its_default(cmd):
    """issue 34: `export --help` had no text for NOTEBOOK, -o, --no-execute; `run --help`
    hid the defaults of --history and --timeout."""
    parser = _subparsers()[cmd]
    text = words(parser.format_help())
    for action in parser._actions:
        if action.dest == "help":
            continue
        assert action.help and len(action.help) > 10, (cmd, action.option_strings or action.dest)
        default = action.default
        if default not in (None, False, [], argparse_suppress()) and not isinstance(default, bool):
            shown = f"{default:g}" if isinstance(default, float) else str(default)
            assert "default" in action.help and shown in action.help, (cmd, action.dest, action.help)
    if cmd == "export":
        for says in ("NOTEBOOK the .ipynb", "-o FILE.html", "--no-execute convert"):
            assert says in text, text


def argparse_suppress():
    import argparse
    return argparse.SUPPRESS


@pytest.mark.parametrize("args,says", [
    # the CLI word for the scenario's own value is `default` (issue 34: it said None)
    (["run", "--batch", "0"], "or default (the scenario's own)"),
    (["run", "--seq-len", "-3"], "or default (the scenario's own)"),
    (["run", "--timeout", "soon"], "--timeout: invalid float value: 'soon'"),
    (["export", "--cell-timeout", "x", "nb.ipynb"], "--cell-timeout: invalid int value"),
    (["kernel", "uninstall"], "invalid choice: 'uninstall'"),
    (["demo", "--n", "two"], "--n: invalid int value: 'two'"),
    (["view", "--rank", "first"], "--rank: invalid int value: 'first'"),
    (["notebooks", "a", "b"], "unrecognized arguments: b"),
], ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_a_bad_value_names_the_option_in_the_command_lines_words(tmp_path, args, says, capsys,
                                                               monkeypatch):
    code, _, err = cli_here(args, tmp_path, capsys, monkeypatch)
    assert code == 2 and "Traceback" not in err, err
    assert says in err and "None" not in err, err


@pytest.mark.parametrize("args", [["lab", "--notebooks-dir"], ["lab", "--notebooks-dir", "--no-browser"],
                                  ["lab", "--notebooks-dir="]])
def test_lab_without_a_notebooks_folder_is_one_line(tmp_path, args):
    """issue 34: a ValueError traceback before."""
    r = nbtools_cli(*args, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip() == ("nbtools lab: --notebooks-dir needs a folder after it, e.g. "
                                "--notebooks-dir ~/nbtools-notebooks (`nbtools lab --help`)")


def test_lab_help_says_its_options(tmp_path):
    r = nbtools_cli("lab", "--help", cwd=tmp_path)
    assert r.returncode == 0 and "--notebooks-dir DIR" in r.stdout
    assert "(default ./nbtools-notebooks;" in words(r.stdout), r.stdout


def test_missing_extras_agree_in_number():
    from nbtools.common.extras import MissingExtra, require
    with pytest.raises(MissingExtra, match="needs no_such_a, no_such_b, which are not installed"):
        require("no_such_a", "no_such_b", why="this")
    with pytest.raises(MissingExtra, match="needs no_such_a, which is not installed"):
        require("no_such_a", why="this")


def test_missing_extra_names_it(tmp_path):
    r = nbtools_cli("lab", "--no-browser", cwd=tmp_path, pre="sys.modules['jupyterlab'] = None; ")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    # from a clone: its own folder, editable, for this interpreter (issue 34: the index name,
    # which nothing is published under yet, was the advice everywhere)
    assert "jupyterlab" in r.stderr and f"{sys.executable} -m pip install -e '{ROOT}[lab]'" in r.stderr
    # the index name on its own (`pip install 'torch-nbtools[lab]'`), not the tail of the
    # clone's own path, which is `.../torch-nbtools[lab]` in a clone named as the project
    assert "torch-nbtools[" not in r.stderr.replace(f"{ROOT}[", "<clone>["), r.stderr


def test_a_scenario_without_its_package_stops_before_the_lab_naming_the_build(tmp_path):
    """resnet50-ddp without torchvision: one line naming the torchvision built for this
    torch (from PyTorch's index for its build), before any engine starts."""
    from nbtools.common.extras import torch_build
    version, cuda = torch_build()
    r = nbtools_cli("run", "--scenario", "resnet50-ddp", cwd=tmp_path,
                    pre="sys.modules['torchvision'] = None; ")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "lab:" not in r.stdout, r.stdout + r.stderr
    minor = int(version.split(".")[1])
    assert f"torchvision==0.{minor + 15}.*" in r.stderr, r.stderr
    assert f"download.pytorch.org/whl/{'cpu' if cuda is None else 'cu' + cuda.replace('.', '')}" \
        in r.stderr


def test_run_help_says_what_compile_outside_does():
    """docs/findings.md: torch.compile(DDP(m)) compiled the inner forward (1 graph) on 2.11."""
    r = nbtools_cli("run", "--help")
    text = " ".join(r.stdout.split())
    assert "compiles nothing" not in text and "0 graphs" not in text
    assert "compiles the model's forward whole" in text


def test_table_is_narrow_with_each_label_whole():
    head = format_table([]).splitlines()[0]
    assert len(head) <= 112 and head.split()[0] == "rank"


def test_table_legend_explains_every_short_column():
    head = format_table([]).splitlines()[0].split()
    for col in head[head.index("step_ms"):-1]:       # the last is status
        assert re.search(rf"(^|[ (,]){re.escape(col)}[ ,:)]", TABLE_LEGEND), col


def test_notebooks_copies_them_and_keeps_edited_copies(tmp_path):
    shipped = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert len(shipped) >= 6
    dest = tmp_path / "tut"
    done = dict(copy_tutorials(dest))
    assert sorted(p.name for p in dest.glob("*.ipynb")) == shipped
    assert all(done[n] == "copied" for n in shipped)
    # the notebooks' links to the docs resolve inside the copy
    for nb in dest.glob("*.ipynb"):
        for link in re.findall(r"\]\((docs/[^)#]+)", nb.read_text()):
            assert (dest / link).exists(), (nb.name, link)
    edited = dest / shipped[0]
    edited.write_text(edited.read_text().replace("torch-nbtools", "my notes", 1))
    mine = edited.read_text()
    again = dict(copy_tutorials(dest))
    assert again[shipped[0]].startswith("kept") and edited.read_text() == mine
    assert all(again[n] == "unchanged" for n in shipped[1:])
    r = nbtools_cli("notebooks", dest)
    assert r.returncode == 0 and "kept" in r.stdout and shipped[0] in r.stdout
    r = nbtools_cli("notebooks", dest, "--force")
    assert r.returncode == 0 and "overwritten" in r.stdout
    assert edited.read_text() != mine
    json.loads(edited.read_text())


def test_kernel_install_writes_the_shipped_spec(tmp_path):
    from nbtools.cli.kernelspec import install
    path = Path(install(prefix=str(tmp_path)))
    got = json.loads((path / "kernel.json").read_text())
    want = json.loads((ROOT / "kernels" / "torch-nbtools" / "kernel.json").read_text())
    argv, shipped_argv = got.pop("argv"), want.pop("argv")
    assert argv == [sys.executable] + shipped_argv[1:]
    assert got == want and want["env"] == {"PYTHONUNBUFFERED": "1"}


def _h200_traces(folder: Path) -> list:
    import shutil
    from nbtools.common.package_data import h200_traces_dir
    files = sorted(h200_traces_dir().glob("tp_off_rank*.json.gz"))
    return [Path(shutil.copy(f, folder)) for f in files]


def _rows(stdout: str) -> dict:
    return {w[0]: w for w in map(str.split, stdout.splitlines())
            if w and w[0] in ("0", "1", "2", "all")}


def test_view_reads_your_own_traces_a_table_and_one_timeline(tmp_path):
    """A folder of Kineto traces from a person's own job (the committed 2 x H200 TP files):
    per rank the profiled step and its parts, the run's row, which file each rank came
    from; --html: every rank's timeline on one clock in one offline file."""
    from nbtools import load_traces
    files = _h200_traces(tmp_path)
    (tmp_path / "out").mkdir()
    r = nbtools_cli("view", tmp_path, "--html", tmp_path / "t.html", "--perfetto",
                    tmp_path / "out" / "both.json", "--explain", cwd=tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    head = r.stdout.splitlines()[0].split()
    assert head[:6] == ["rank", "window_ms", "compute_ms", "comm_ms", "exposed_comm_ms",
                        "idle_ms"] and "step_ms" not in head
    assert "(rank 0: tp_off_rank0.json.gz, rank 1: tp_off_rank1.json.gz)" in r.stdout
    s, rows = load_traces(files).summary.set_index("rank"), _rows(r.stdout)
    for rank in (0, 1):
        got = dict(zip(head[1:], rows[str(rank)][1:]))
        for col in ("profiled_window_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "idle_ms"):
            label = "window_ms" if col == "profiled_window_ms" else col
            assert float(got[label]) == pytest.approx(s.loc[rank, col], abs=6e-4), col
    assert "all" in rows and "exposed_comm_ms (ms):" in r.stdout     # its legend (--explain)
    # who waited for whom (these traces: rank 0's host launched the all-reduces late)
    assert "straggler: rank 0 launched the all-reduces late" in r.stdout, r.stdout
    html = unpacked((tmp_path / "t.html").read_text())    # the figures' data as text too
    # both ranks' GPU streams drawn, the collectives' tooltips read (--html asks for them)
    assert "r0 GPU 0 stream 7" in html and "r1 GPU 1 stream 7" in html
    assert "collective: allreduce" in html
    # no StepConfig: its fields are not listed as rows of dashes; where it came from is
    assert "<th>scenario</th>" not in html and "<th>source</th><td>traces</td>" in html
    # --perfetto: both ranks in the one file Perfetto opens, arrows between their collectives
    ev = json.loads((tmp_path / "out" / "both.json").read_text())["traceEvents"]
    assert {e["pid"]: e["args"]["name"] for e in ev if e.get("name") == "process_name"} == \
        {0: "rank 0", 1: "rank 1"}
    assert sum(e.get("ph") == "s" for e in ev) == sum(e.get("ph") == "f" for e in ev) > 0
    assert f"perfetto: {tmp_path / 'out' / 'both.json'}" in r.stdout
    # a history folder is not traces: one line saying what --perfetto takes
    (tmp_path / "hist" / "0001").mkdir(parents=True)
    h = nbtools_cli("view", tmp_path / "hist", "--perfetto", tmp_path / "x.json")
    assert h.returncode == 2 and "--perfetto takes trace files" in h.stderr, h.stderr


def test_view_of_traces_keeps_the_good_ranks_when_one_file_is_damaged(tmp_path):
    _h200_traces(tmp_path)
    (tmp_path / "rank2.json").write_text('{"traceEvents": [')
    r = nbtools_cli("view", tmp_path, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert set(_rows(r.stdout)) == {"0", "1", "all"}
    assert "rank2.json: not read: " in r.stderr and "rank2.json: not read: " in r.stdout
    # one file alone: read as it is
    one = nbtools_cli("view", tmp_path / "tp_off_rank1.json.gz", cwd=tmp_path)
    assert one.returncode == 0 and set(_rows(one.stdout)) == {"1"}, one.stderr


def test_view_of_two_files_holding_one_rank_stops_with_one_line(tmp_path):
    import shutil
    a = _h200_traces(tmp_path)[0]
    shutil.copy(a, tmp_path / "again_rank0.json.gz")
    r = nbtools_cli("view", tmp_path, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "both hold rank 0" in r.stderr, r.stderr


TORCHRUN_JOB = '''
import torch, torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
dist.init_process_group("gloo")
m = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(4)]))
opt = torch.optim.SGD(m.parameters(), 0.01)
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2),
             on_trace_ready=tensorboard_trace_handler("traces"), record_shapes=True) as p:
    for _ in range(5):
        m(torch.randn(32, 128)).sum().backward(); opt.step(); opt.zero_grad(); p.step()
dist.destroy_process_group()
'''


@pytest.mark.slow
def test_view_reads_what_a_torchrun_job_with_the_profiler_wrote(tmp_path):
    """The path a person takes: torchrun, 2 gloo ranks, torch.profiler's
    tensorboard_trace_handler (file names say host and pid, not the rank: the rank comes from
    the trace's distributedInfo), then `nbtools view traces/`."""
    (tmp_path / "job.py").write_text(TORCHRUN_JOB)
    import os
    import signal
    # its own session: on a timeout the workers go with torchrun, never left behind
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                            "--nproc-per-node", "2", "job.py"], cwd=tmp_path, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           start_new_session=True)
    try:
        out, _ = job.communicate(timeout=240)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert job.returncode == 0, out[-2000:]
    files = sorted((tmp_path / "traces").iterdir())
    assert len(files) == 2 and not any("rank" in f.name for f in files), files
    r = nbtools_cli("view", tmp_path / "traces", "--html", tmp_path / "t.html", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    html = unpacked((tmp_path / "t.html").read_text())    # the figures' data as text too
    assert "r1 CPU thread" in html and "gloo:all_reduce" in html
    assert "<th>devices</th><td>—</td>" in html and "<th>backend</th><td>gloo</td>" in html
    head, rows = r.stdout.splitlines()[0].split(), _rows(r.stdout)
    assert set(rows) == {"0", "1", "all"}, r.stdout
    assert "straggler: " in r.stdout      # a verdict, or why none is resolved
    for rank in ("0", "1"):
        got = {k: float(v) for k, v in zip(head[1:-1], rows[rank][1:-1]) if v != "-"}
        # the parts fit in the step they are shown beside (CLI rounding: 3 decimals)
        assert got["comm_ms"] > 0 and got["exposed_comm_ms"] <= got["comm_ms"] + 1e-3
        assert got["compute_ms"] + got["exposed_comm_ms"] + got["idle_ms"] \
            <= got["window_ms"] + 3e-3, got


def test_view_of_one_profile_that_says_no_rank_shows_it_as_rank_0_or_the_rank_given(tmp_path):
    """A single process's profile (export_chrome_trace without torch.distributed): no
    distributedInfo, no rank in the name. One file: rank 0, said; --rank N: rank N. A folder
    of such files cannot be told apart: one line saying what to do from the command line."""
    doc = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10 + 20 * i,
                            "dur": 15, "pid": 1, "tid": 1} for i in range(5)]}
    (tmp_path / "sf").mkdir()
    for name in ("profile.json", "sf/a.json", "sf/b.json"):
        (tmp_path / name).write_text(json.dumps(doc))
    r = nbtools_cli("view", "profile.json", cwd=tmp_path)
    assert r.returncode == 0 and set(_rows(r.stdout)) == {"0"}, r.stdout + r.stderr
    assert "profile.json: the trace says no rank" in r.stdout and "shown as rank 0" in r.stdout
    r = nbtools_cli("view", "profile.json", "--rank", "2", cwd=tmp_path)
    assert r.returncode == 0 and set(_rows(r.stdout)) == {"2"}, r.stdout + r.stderr
    for args, says in ((["sf"], "rename the files rank-<N>.json"),
                       (["sf", "--rank", "1"], "--rank: names the rank of one trace file")):
        r = nbtools_cli("view", *args, cwd=tmp_path)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert says in r.stderr and "Traceback" not in r.stderr


def test_view_of_two_traces_compares_them_with_a_verdict(tmp_path):
    """Before/after a change: the committed 2 x H200 TP traces, eager (A) and CUDA graphs
    (B). Both tables, each one's straggler, B against A on the profiled step and its parts,
    and the verdict on the step's window from each side's steps, in the words of every
    surface; --html: the report with the A/B comparison."""
    import shutil
    from nbtools import load_traces
    from nbtools.common.package_data import h200_traces_dir
    from nbtools.results.comparison import Comparison
    src = h200_traces_dir()
    for mode in ("off", "reduce-overhead"):
        (tmp_path / mode).mkdir()
        for f in src.glob(f"tp_{mode}_rank*.json.gz"):
            shutil.copy(f, tmp_path / mode)
    r = nbtools_cli("view", "off", "reduce-overhead", "--html", "ab.html", cwd=tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    out = r.stdout
    a, b = (load_traces(tmp_path / m) for m in ("off", "reduce-overhead"))
    verdict = Comparison(a, b, metric="profiled_window_ms").verdict
    assert f"verdict (window_ms): {verdict.text}" in out
    assert verdict.resolved and "faster" in verdict.text
    assert "A = " in out and "(off): straggler: rank 0 launched the all-reduces late" in out
    assert "B = " in out and "(reduce-overhead): straggler: " in out
    block = out.split("B against A, per profiled step:")[1].split("verdict (")[0]
    rows = {w[0]: w for w in map(str.split, block.splitlines()) if w}
    wa, wb = a.summary["profiled_window_ms"].mean(), b.summary["profiled_window_ms"].mean()
    assert float(rows["window_ms"][1]) == pytest.approx(wa, abs=6e-4)
    assert float(rows["window_ms"][2]) == pytest.approx(wb, abs=6e-4)
    assert float(rows["window_ms"][4]) == pytest.approx(wb / wa, abs=6e-3)
    assert float(rows["graph%"][2]) > 99          # B replays CUDA graphs
    html = (tmp_path / "ab.html").read_text()
    import html as h
    assert "A/B comparisons" in html and h.escape(verdict.text.split(" (")[0]) in html
    for args, says in ((["off", "reduce-overhead", "off"], "3 paths: give one"),
                       (["off", "nowhere"], "nowhere (B): not a trace file or a folder of "
                                            "traces"),
                       (["off", "reduce-overhead", "--perfetto", "x.json"],
                        "--perfetto: takes one trace folder or file, not two")):
        e = nbtools_cli("view", *args, cwd=tmp_path)
        assert e.returncode == 2 and len(e.stderr.strip().splitlines()) == 1, e.stderr
        assert says in e.stderr and "Traceback" not in e.stderr


def test_run_checks_the_ranks_device_before_the_lab_starts(tmp_path):
    """issue 44: `run --cudagraph manual` on CPU ranks started the lab (engines, a process
    group) before refusing. Every rule a config can be checked for here is checked first:
    no `lab:` line, one line of error."""
    cpu = "import os; os.environ['CUDA_VISIBLE_DEVICES'] = ''; "
    for args, says in ((["--cudagraph", "manual"], "cudagraph='manual' needs CUDA"),
                       (["--compile", "default", "--backend", "cudagraphs"],
                        "backend='cudagraphs' needs CUDA"),
                       (["--compile", "off,default", "--autocast", "fp16"],
                        "autocast='fp16' on CPU ranks")):
        r = nbtools_cli("run", *args, cwd=tmp_path, pre=cpu)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert "lab:" not in r.stdout and r.stdout == "", r.stdout
        assert len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, r.stderr


def test_rounds_below_one_names_rounds(tmp_path):
    """issue 44: `run --rounds 0` answered about --repeats (the option's old spelling)."""
    for n in ("0", "-3"):
        r = nbtools_cli("run", "--rounds", n, cwd=tmp_path)
        assert r.returncode == 2 and "Traceback" not in r.stderr and r.stdout == ""
        assert r.stderr.startswith(f"nbtools run: --rounds {n}: give a whole number >= 1"), \
            r.stderr
        assert "--repeats" not in r.stderr


def test_lab_help_says_whether_its_extra_is_here(tmp_path):
    """issue 44: `lab --help` said "Needs the [lab] extra" with the extra installed."""
    r = nbtools_cli("lab", "--help", cwd=tmp_path)
    assert r.returncode == 0 and "Needs the [lab] extra" not in r.stdout, r.stdout
    assert "[lab] extra (JupyterLab, ipywidgets, jupyter_bokeh) is installed" in words(r.stdout)
    r = nbtools_cli("lab", "--help", cwd=tmp_path, pre="sys.modules['jupyter_bokeh'] = None; ")
    assert r.returncode == 0 and "is installed" not in r.stdout, r.stdout
    assert "Needs the [lab] extra" in r.stdout and "needs jupyter_bokeh" in r.stdout, r.stdout


def test_dir_of_the_package_lists_its_lazy_names():
    """issue 44: dir(nbtools) (and tab completion) omitted Lab, Workload and the rest."""
    shown = dir(nbtools)
    assert set(nbtools.__all__) <= set(shown), set(nbtools.__all__) - set(shown)
    for name in ("Lab", "Workload", "Run", "History", "load_traces", "export_html"):
        assert name in shown and getattr(nbtools, name) is not None


def _two_runs_of_one_config(folder):
    import pandas as pd
    from nbtools.results.history import History
    from nbtools.results.run import Run
    h = History(folder)
    cfg = config.StepConfig(compile="default")
    for t, ms in ((1_780_000_000.0, 2.5), (1_780_000_061.0, 2.7)):
        h.add(Run(config=cfg, started=t, summary=pd.DataFrame({"rank": [0], "step_ms": [ms]})))
    return h


def test_view_names_each_run_of_one_config_by_id_and_time(tmp_path):
    """issue 44: `view` listed the runs of one config (rounds, a config run again) under the
    same label, with nothing to tell them apart or find one with."""
    h = _two_runs_of_one_config(tmp_path / "runs")
    r = nbtools_cli("view", "runs", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    heads = [ln for ln in r.stdout.splitlines() if ln.startswith("tp-mlp-infer")]
    assert len(heads) == 2 and heads[0] != heads[1], r.stdout
    import time
    for head, run in zip(heads, h.runs):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.started))
        assert head.endswith(f"(#{run.run_id}, {when})"), head


def test_view_of_a_folder_without_runs_says_how_to_make_some(tmp_path):
    """issue 44: "no runs in X" and nothing more."""
    (tmp_path / "empty").mkdir()
    for args, where in ((["view", "empty"], "empty"), (["view"], "nbtools-runs")):
        r = nbtools_cli(*args, cwd=tmp_path)
        assert r.returncode in (1, 2) and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        hist = "" if where == "nbtools-runs" else f" --history {where}"
        assert f"`python -m nbtools run{hist}`" in r.stderr, r.stderr
        assert f"Lab(history='{where}')" in r.stderr and "profiler traces" in r.stderr


def test_a_subcommands_unknown_option_prints_that_commands_usage(capsys):
    """issue 54: `view --bogus` printed the top level's usage (run|demo|view|...)."""
    from nbtools.cli.main import main
    for cmd in ("view", "run"):
        with pytest.raises(SystemExit) as e:
            main([cmd, "--bogus"])
        err = capsys.readouterr().err
        assert e.value.code == 2
        assert err.startswith(f"usage: nbtools {cmd} ") and \
            f"nbtools {cmd}: error: unrecognized arguments: --bogus" in err, err


def test_lab_help_suggests_the_current_token_option(tmp_path):
    """issue 54: `lab --help` suggested --ServerApp.token, which jupyter_server 2 deprecates
    for --IdentityProvider.token (the venv's jupyter lab warns on the old spelling)."""
    r = nbtools_cli("lab", "--help", cwd=tmp_path)
    assert r.returncode == 0 and "--IdentityProvider.token=" in r.stdout, r.stdout
    assert "ServerApp.token" not in r.stdout
