"""Issue 44, "Done when" 1: no command or call replaces a file it did not write, and every
write lands whole or not at all. The full disk is real: a small tmpfs mounted for the test
(CI and this container run as root, where `mount -t tmpfs` works; where mounting is
impossible those tests skip, saying why: docs/testing.md). No engines here: the outputs
are made from the shipped H200 traces; the command line runs in this process.

Seen before: `run --html README.md` replaced a tracked README with 2 MB of HTML;
to_perfetto replaced any other .json; a full disk cut an earlier good report to 4 KB and
raised an OSError naming no file."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from nbtools import export_html, load_traces
from nbtools.common.atomic import PARTIAL_SUFFIX, TMP_SUFFIX, WriteFailed
from nbtools.results.history import History
from nbtools.results.trace_export import write_kineto

from support.cli import cli, one_line
from support.paths import H200

TRACE = H200 / "tp_off_rank0.json.gz"


@pytest.fixture(scope="module")
def run():
    return load_traces(TRACE)


# -- never over a file nbtools did not write -------------------------------------------------

def test_run_html_over_a_readme_is_refused_before_the_lab_starts(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# my project\n")
    rc, out, err = cli(capsys, "run", "--steps", "1", "--profiled", "0", "--html", readme,
                       "--history", tmp_path / "h")
    line = one_line(err)
    assert rc == 2 and "README.md: is a file nbtools did not write" in line and "--force" in line
    assert out == "" and not (tmp_path / "h").exists()      # no lab started, nothing saved
    assert readme.read_text() == "# my project\n"


@pytest.mark.parametrize("flag", ["--html", "--perfetto"])
def test_view_outputs_never_replace_another_file_and_replace_their_own(tmp_path, capsys,
                                                                       flag):
    mine = tmp_path / ("notes.html" if flag == "--html" else "package.json")
    mine.write_text('{"name": "x"}')
    rc, out, err = cli(capsys, "view", TRACE, flag, mine)
    assert rc == 2 and "is a file nbtools did not write" in one_line(err) and out == ""
    assert mine.read_text() == '{"name": "x"}'
    ours = tmp_path / ("report.html" if flag == "--html" else "all.json")
    for _ in range(2):          # the second time over its own output: no --force needed
        rc, out, err = cli(capsys, "view", TRACE, flag, ours)
        assert rc == 0, err
    assert "nbtools_written_by" in ours.read_text()[:200]
    rc, out, err = cli(capsys, "view", TRACE, flag, mine, "--force")
    assert rc == 0 and mine.read_text() != '{"name": "x"}'


def test_export_refuses_to_replace_an_html_it_did_not_write(tmp_path, capsys):
    import nbformat
    nb = tmp_path / "analysis.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# hi")]),
                   str(nb))
    page = tmp_path / "analysis.html"
    page.write_text("<p>my own page</p>")
    rc, out, err = cli(capsys, "export", nb, "--no-execute")    # the default output
    assert rc == 2 and "analysis.html: is a file nbtools did not write" in one_line(err)
    assert page.read_text() == "<p>my own page</p>"
    rc, out, err = cli(capsys, "export", nb, "--no-execute", "-o", tmp_path / "out.html")
    assert rc == 0 and "nbtools_written_by" in (tmp_path / "out.html").read_text()[:300]
    rc, out, err = cli(capsys, "export", nb, "--no-execute", "-o", tmp_path / "out.html")
    assert rc == 0, err                                          # its own: replaced
    rc, out, err = cli(capsys, "export", nb, "--no-execute", "--force")
    assert rc == 0 and "# hi" not in page.read_text()[:100] and "hi" in page.read_text()


def test_python_writers_refuse_a_foreign_file_and_name_force(tmp_path, run):
    foreign = tmp_path / "data.json"
    foreign.write_text('{"a": 1}')
    page = tmp_path / "page.html"
    page.write_text("<html>mine</html>")
    calls = [lambda: run.to_perfetto(foreign), lambda: export_html(page, [run]),
             lambda: run.plot(width=600).save(page)]
    for call in calls:
        with pytest.raises(FileExistsError, match=r"nbtools did not write.*force=True"):
            call()
    assert foreign.read_text() == '{"a": 1}' and page.read_text() == "<html>mine</html>"
    assert run.plot(width=600).save(page, force=True) == str(page)
    assert run.plot(width=600).save(page) == str(page)          # now its own
    # a rank's own trace under write_kineto's name is refused; its own files are replaced
    (tmp_path / "k").mkdir()
    shutil.copy(TRACE, tmp_path / "k" / "rank-0.pt.trace.json.gz")
    with pytest.raises(FileExistsError, match="is a profiler trace"):
        write_kineto(run, tmp_path / "k")
    paths = write_kineto(run, tmp_path / "kk")
    assert write_kineto(run, tmp_path / "kk") == paths
    assert len(load_traces(tmp_path / "kk").events) == len(run.events)   # still read


def test_a_run_is_never_saved_over_a_folder_of_other_files(tmp_path, run):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "notes.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="mine: holds other files"):
        run.save(d)
    assert os.listdir(d) == ["notes.txt"]
    first = run.save(tmp_path / "saved")
    assert run.save(first) == first and (first / "run.json").is_file()   # its own: replaced
    other = load_traces(TRACE)                                            # another run
    with pytest.raises(FileExistsError, match="saved: holds other files .another run"):
        other.save(first)
    assert History.load(tmp_path)[0].run_id == run.run_id


# -- a full disk: the old file whole, one line naming it ------------------------------------

@contextlib.contextmanager
def mounted(where: Path, size: str):
    """A tmpfs of ``size`` mounted at ``where`` for the block; the test is skipped only
    where mounting is impossible (not root, or a container without CAP_SYS_ADMIN), with
    mount's own words."""
    where.mkdir()
    name = f"nbtools-test-{uuid.uuid4().hex[:8]}"
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", name, str(where)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({r.stderr.strip() or r.returncode}): "
                    "the full-disk tests need root with mount rights (docs/testing.md)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MB disk of the test's own."""
    with mounted(tmp_path / "disk", "4m") as where:
        yield where


def fill(disk: Path, leave: int = 0) -> None:
    """Take the disk's free space, all of it but ``leave`` bytes."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with open(disk / "filler", "ab") as fh:
        try:
            fh.write(b"\0" * max(free - leave, 0))
        except OSError:
            pass


@pytest.fixture
def traces(tmp_path) -> Path:
    """Both ranks of the H200 profile (one rank alone is said on stderr: one line more)."""
    d = tmp_path / "traces"
    d.mkdir()
    for r in (0, 1):
        shutil.copy(H200 / f"tp_off_rank{r}.json.gz", d)
    return d


def test_a_full_disk_leaves_the_earlier_report_whole(small_disk, traces, run, capsys):
    report = small_disk / "report.html"
    rc, out, err = cli(capsys, "view", traces, "--html", report)
    assert rc == 0, err
    before = report.read_bytes()
    assert len(before) > 512 << 10           # a packed report of two ranks: 0.8 MB
    fill(small_disk, leave=len(before) // 4)  # room for a quarter of a new report
    rc, out, err = cli(capsys, "view", traces, "--html", report)
    line = one_line(err)
    assert rc == 2 and line == (f"nbtools view: {report}: could not be written (No space "
                                "left on device); the file there before is unchanged: free "
                                "space on that disk, or give another place")
    assert report.read_bytes() == before
    assert [p for p in os.listdir(small_disk) if p.endswith(TMP_SUFFIX)] == []
    # Python: the same, as an exception naming the file
    with pytest.raises(WriteFailed, match=f"{report}: could not be written"):
        export_html(report, [run])
    assert report.read_bytes() == before


def test_a_full_disk_never_truncates_a_forced_perfetto_file(small_disk, run):
    target = small_disk / "trace.json"
    run.to_perfetto(target)
    before = target.read_bytes()
    fill(small_disk, leave=64 << 10)
    with pytest.raises(OSError) as e:
        run.to_perfetto(target, force=True)
    assert isinstance(e.value, WriteFailed) and e.value.filename == str(target)
    assert "No space left on device" in str(e.value) and target.read_bytes() == before


def test_a_full_disk_keeps_the_run_in_memory_and_leaves_no_half_run(small_disk, run):
    h = History(small_disk / "runs")
    h.add(run)
    saved = run.folder
    fill(small_disk)
    again = load_traces(TRACE)
    with pytest.warns(RuntimeWarning, match=r"could not be saved to .*No space left on device"):
        h.add(again)
    assert h[-1] is again and again.folder is None
    names = os.listdir(small_disk / "runs")
    assert not [n for n in names if n.endswith(PARTIAL_SUFFIX)], names
    loaded = History.load(small_disk / "runs")
    assert [r.run_id for r in loaded] == [run.run_id] and loaded.damaged == []
    os.unlink(small_disk / "filler")          # room again: the kept run saves
    assert again.save(small_disk / "later") and len(History.load(small_disk / "runs")) == 1
    assert saved.is_dir()


@pytest.mark.parametrize("where", ["IPYTHONDIR", "--history"])
def test_run_on_a_full_disk_says_so_before_any_engine_starts(small_disk, tmp_path, where):
    """ipyparallel's engines write their profile there first: on a full disk they died with
    three tracebacks; a full history folder lost every run of the sweep. (A full TMPDIR is
    no such case: Python's tempfile passes over a folder it cannot write.)"""
    fill(small_disk)
    env = dict(os.environ, IPYTHONDIR=str(small_disk / "ipython" if where == "IPYTHONDIR"
                                          else tmp_path / "ipython"))
    history = small_disk / "runs" if where == "--history" else tmp_path / "runs"
    r = subprocess.run([sys.executable, "-m", "nbtools", "run", "--steps", "1",
                        "--history", str(history)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 2 and r.stdout == "", r.stderr
    line = one_line(r.stderr)
    assert line.startswith("nbtools run: ") and "its disk is full" in line and \
        str(small_disk) in line and where in line, line
    assert os.listdir(small_disk) == ["filler"]


# -- a save cut by a killed process ----------------------------------------------------------

KILLED_SAVE = textwrap.dedent("""
    import os, signal, sys
    from nbtools import load_traces
    from nbtools.results.history import History
    h = History(sys.argv[2])
    h.add(load_traces(sys.argv[1]))          # one whole run
    def hook(event, args):                   # killed as the second run's run.json is opened
        if event == "open" and str(args[0]).endswith("run.json") and \\
                ".nbtools-partial" in str(args[0]):
            os.kill(os.getpid(), signal.SIGKILL)
    sys.addaudithook(hook)
    h.add(load_traces(sys.argv[1]))
""")


def test_a_save_cut_by_a_kill_is_never_counted_as_a_run(tmp_path, capsys):
    folder = tmp_path / "runs"
    r = subprocess.run([sys.executable, "-c", KILLED_SAVE, str(TRACE), str(folder)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == -9, r.stderr
    h = History.load(folder)
    assert len(h) == 1
    (name, why), = h.damaged
    assert name.endswith(PARTIAL_SUFFIX) and "did not finish" in why
    rc, out, err = cli(capsys, "view", folder)
    assert rc == 0 and f"damaged run folder {name}: a save that did not finish" in err


# -- notebooks the export cannot read, names with escape sequences --------------------------

@pytest.mark.parametrize("text, says", [
    ('{"cells": [], "metadata": ' + '{"a": ' * 5000 + '1' + '}' * 5000
     + ', "nbformat": 4, "nbformat_minor": 5}', "its JSON nests deeper than Python's reader"),
    ('{"cells": [], "metadata": ' + '{"a": ' * 900 + '1' + '}' * 900
     + ', "nbformat": 4, "nbformat_minor": 5}', "metadata.a.a.a"),
    (json.dumps({"cells": [], "metadata": {}, "nbformat": 99, "nbformat_minor": 0}),
     "nbformat 99 is not a format this nbtools reads")],
    ids=["nested-5000", "nested-900", "nbformat-99"])
def test_export_of_an_unreadable_notebook_is_one_line_naming_it(tmp_path, capsys, text, says):
    nb = tmp_path / "odd.ipynb"
    nb.write_text(text)
    rc, out, err = cli(capsys, "export", nb, "--no-execute")
    line = one_line(err)
    assert rc == 2 and line.startswith(f"nbtools export: {nb}: not a valid notebook") \
        and says in line, line
    assert not (tmp_path / "odd.html").exists()


ESC = "\x1b[2J\x1b]0;owned\x07\r"


def test_every_path_the_cli_prints_has_its_escapes_neutralised(tmp_path, capsys):
    import nbformat
    folder = tmp_path / f"runs{ESC}"
    History(folder).add(load_traces(TRACE))
    nb = tmp_path / f"nb{ESC}.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), str(nb))
    outs = [cli(capsys, "view", folder, "--html", tmp_path / f"r{ESC}.html"),
            cli(capsys, "view", TRACE, "--perfetto", tmp_path / f"p{ESC}.json"),
            cli(capsys, "export", nb, "--no-execute"),
            cli(capsys, "export", tmp_path / f"missing{ESC}.ipynb"),
            cli(capsys, "view", tmp_path / f"nowhere{ESC}")]
    for rc, out, err in outs:
        assert "\x1b" not in out + err and "\r" not in out + err and "\x07" not in out + err
    assert [rc for rc, _, _ in outs] == [0, 0, 0, 2, 2]
    assert "r?[2J?]0;owned??.html" in outs[0][1] and "nb?[2J?]0;owned??.html" in outs[2][1]


FILL_AT_SAVE = textwrap.dedent("""
    import os, sys
    from nbtools.cli.main import main
    disk = sys.argv[1]
    def hook(event, args):       # the disk fills up as the run's save starts
        if event == "os.mkdir" and str(args[0]).endswith(".nbtools-partial") \\
                and not os.path.exists(os.path.join(disk, "filler")):
            st = os.statvfs(disk)
            with open(os.path.join(disk, "filler"), "wb") as fh:
                try:
                    fh.write(b"\\0" * (st.f_bavail * st.f_frsize))
                except OSError:
                    pass
    sys.addaudithook(hook)
    sys.exit(main(sys.argv[2:]))
""")


@pytest.mark.slow
def test_run_whose_disk_fills_during_the_save_says_it_in_one_line(tmp_path):
    """A lab run on 2 CPU ranks whose history disk (a 24 MB tmpfs) fills as the save
    starts: the table is printed, the warning is one line naming the folder and why, no
    half-saved run is left, and the exit status says a run was not saved."""
    with mounted(tmp_path / "disk", "24m") as where:
        r = subprocess.run([sys.executable, "-c", FILL_AT_SAVE, str(where), "run", "--steps",
                            "1", "--warmup", "0", "--profiled", "0", "--quiet", "--history",
                            str(where / "runs")], capture_output=True, text=True, timeout=600)
        assert r.returncode == 1, r.stderr
        assert "Traceback" not in r.stderr and "step_ms" in r.stdout
        said = [ln for ln in r.stderr.splitlines() if "could not be saved" in ln]
        assert len(said) == 2, r.stderr
        assert said[0].startswith("warning: run ") and f"{where / 'runs'}" in said[0] and \
            "No space left on device" in said[0] and "kept in memory" in said[0]
        assert said[1].startswith("nbtools run: run(s) ") and "see the warning above" in said[1]
        assert [n for n in os.listdir(where / "runs") if not n.startswith(".numbers")] == []


def test_a_save_that_fails_after_the_logs_keeps_the_runs_torch_trace_logs(small_disk):
    """The TORCH_TRACE logs a run brought back live only in memory until a save commits:
    a disk that fills between the logs and run.json must not drop them (they were cleared
    as soon as they were written, before the rename that never came)."""
    logs = {0: {"dedicated_log_torch_trace_rank_0_x.log": b"[compile] 0/0\n" * 200}}
    probe = load_traces(TRACE)
    probe.torch_trace_logs = {r: dict(f) for r, f in logs.items()}
    probe.save(small_disk / "probe")
    used = {p.name: os.stat(p).st_blocks * 512
            for p in (small_disk / "probe").rglob("*") if p.is_file()}
    assert probe.torch_trace_logs == {}          # committed: the logs live on disk now
    shutil.rmtree(small_disk / "probe")
    run = load_traces(TRACE)
    run.torch_trace_logs = {r: dict(f) for r, f in logs.items()}
    # room for every file of that save but run.json (tmpfs hands out whole pages)
    fill(small_disk, leave=sum(v for k, v in used.items() if k != "run.json"))
    with pytest.raises(WriteFailed):
        run.save(small_disk / "kept")
    assert run.torch_trace_logs == logs and run.folder is None
    assert not (small_disk / "kept").exists()
    os.unlink(small_disk / "filler")
    run.save(small_disk / "kept")
    assert run.torch_trace_logs == {} and [p.name for p in run.torch_trace] == \
        ["dedicated_log_torch_trace_rank_0_x.log"]


def _file_size_limit(limit: int):
    def pre():
        import resource
        import signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # EFBIG, not the signal's kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return pre


def test_run_past_the_file_size_limit_names_the_folder_it_could_not_write(tmp_path):
    """issue 54: `nbtools run` on a full disk said "[Errno 27] File too large" and named no
    file: ipyparallel's own writes (its cluster file) bypass common/atomic.py. The limit is
    RLIMIT_FSIZE in the child (EFBIG, as a full disk's writes fail), no root needed."""
    r = subprocess.run([sys.executable, "-m", "nbtools", "run", "--steps", "1", "--warmup",
                        "0", "--profiled", "0", "--quiet", "--history", str(tmp_path / "runs")],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       preexec_fn=_file_size_limit(1000))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert re.search(r"nbtools run: \S+/ipython: could not be written \(File too large\)",
                     line), r.stderr
    assert "ulimit -f" in line and "[Errno" not in line
