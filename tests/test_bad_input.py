"""Bad input loses nothing (issue 27): the red-team failures left after issue 16, each with
its test. No engines here (tests/test_bad_input_lab.py has the ones that need a lab): trace
files, history folders, the Lab's arguments (refused before anything starts), exports."""
from __future__ import annotations

import copy
import dataclasses
import gzip
import json
import math
import os
import warnings
import zlib
from pathlib import Path

import pytest

from nbtools import Lab, export_html, load_traces
from nbtools.config.step_config import ConfigError
from nbtools.results.history import History
from nbtools.results.load import TraceError

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "nbtools" / "data" / "h200" / "tp_off_rank0.json.gz"
DOC = json.loads(gzip.open(H200).read())


def _x(doc) -> list:
    return [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]


def _write(tmp: Path, doc, name="rank-0.json", raw: bytes | None = None) -> Path:
    p = tmp / name
    p.write_bytes(raw if raw is not None else json.dumps(doc).encode())
    return p


@pytest.fixture(scope="module")
def whole():
    return load_traces(H200)


# -- traces ------------------------------------------------------------------------------

def test_a_traceevents_key_inside_the_metadata_is_not_the_events(tmp_path, whole):
    """A large "traceEvents" under another key, before the real one: its events loaded as
    real (19,888 of 20,000). Only the top-level key is the events."""
    fake = [dict(ph="X", cat="kernel", name="FAKE", pid=0, tid=7, ts=i, dur=1)
            for i in range(20_000)]
    doc = {"meta": {"note": "x", "traceEvents": fake}, **DOC}
    run = load_traces(_write(tmp_path, doc))
    assert "FAKE" not in set(run.events["name"].astype(str))
    assert len(run.events) == len(whole.events)


def _set_x(key, value=None, drop=False, every=False):
    def edit(doc):   # not the first events: a batch whose first value is odd was caught
        for e in (_x(doc) if every else _x(doc)[5:8]):
            if drop:
                e.pop(key, None)
            else:
                e[key] = value
    return edit


FLAGGED = {  # edit -> words the run's flags must hold (they loaded with no flag before)
    "missing dur": (_set_x("dur", drop=True), "dur is missing"),
    "negative dur": (_set_x("dur", -5), "dur is negative"),
    "name null": (_set_x("name", None), "name is not text"),
    "integer cat": (_set_x("cat", 5, every=True), "cat is not text"),
    "boolean ts": (_set_x("ts", True), "ts is not a finite number"),
    "no ph anywhere": (lambda d: [e.pop("ph", None) for e in d["traceEvents"]
                                  if isinstance(e, dict)], "ph (the event's phase) is missing"),
}


@pytest.mark.parametrize("name", list(FLAGGED))
def test_damaged_events_load_with_a_flag(tmp_path, whole, name):
    edit, words = FLAGGED[name]
    doc = copy.deepcopy(DOC)
    edit(doc)
    run = load_traces(_write(tmp_path, doc))
    assert any(words in f for f in run.flags), run.flags
    if name == "integer cat":   # not called a CPU-only job: the cat is damaged
        assert not any("CPU-only trace" in f for f in run.flags), run.flags
    if name == "boolean ts":    # true is not 1 µs: the events are dropped, not placed
        assert len(run.events) == len(whole.events) - 3


def test_a_cut_inside_a_string_is_called_truncated(tmp_path):
    """Cut inside a string, the JSON error points at the string's start: it was called
    "damaged in the middle, not cut short"."""
    data = json.dumps(DOC).encode()
    tail = data[-20_000:]
    cuts = [len(data) - len(tail) + i + 3 for i in range(len(tail) - 10)
            if tail[i:i + 1] == b'"' and tail[i + 1:i + 6].isalpha()][:12]
    assert len(cuts) >= 10
    for at in cuts:
        with pytest.raises(TraceError, match="ends early") as e:
            load_traces(_write(tmp_path, None, raw=data[:at]))
        assert "damaged in the middle" not in str(e.value)


def _gzip_blanks(p: Path, mb: int) -> Path:
    z, block = zlib.compressobj(1, zlib.DEFLATED, 31), b" " * (1 << 20)
    with open(p, "wb") as fh:
        for _ in range(mb):
            fh.write(z.compress(block))
        fh.write(z.flush())
    return p


def test_gzipped_blanks_stop_at_the_blank_bound(tmp_path):
    """2 GB of gzipped whitespace was read to the end (20 s) and called "empty": past
    scan.MAX_BLANK (256 MB) of leading blanks the reader stops and says what it saw."""
    p = _gzip_blanks(tmp_path / "rank-0.json.gz", 300)
    with pytest.raises(TraceError, match="MB of blanks and no JSON"):
        load_traces(p)


def test_bytes_after_a_complete_gzip_are_ignored_with_a_flag(tmp_path, whole):
    """A whole gzip plus 8 stray bytes was "cannot be read, copy it again"."""
    p = _write(tmp_path, None, "rank-0.json.gz", raw=H200.read_bytes() + b"\x00junk!!\n")
    run = load_traces(p)
    assert len(run.events) == len(whole.events)
    assert any("bytes after the end of the gzip data" in f for f in run.flags), run.flags


def test_max_gb_inf_means_no_cap(whole):
    """load_traces(p, max_gb=float("inf")) raised OverflowError."""
    assert len(load_traces(H200, max_gb=float("inf")).events) == len(whole.events)
    with pytest.raises(TraceError, match="max_gb"):
        load_traces(H200, max_gb=float("nan"))


# -- history -------------------------------------------------------------------------------

def _saved(tmp: Path, whole) -> Path:
    folder = tmp / "runs"
    History(folder).add(dataclasses.replace(whole, run_id="good"))
    History(folder).add(dataclasses.replace(whole, run_id="odd"))
    return folder


def _folder_of(folder: Path, run_id: str) -> Path:
    (d,) = [p for p in folder.iterdir() if p.name.endswith("-" + run_id)]
    return d


def test_history_load_of_a_file_says_so(tmp_path):
    f = tmp_path / "runs"
    f.write_text("not a folder")
    with pytest.raises(NotADirectoryError, match="is a file, not a history folder"):
        History.load(f)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("what", ["fifo run.json", "run.json -> /dev/zero",
                                  "events.parquet -> /dev/zero", "fifo summary.parquet"])
def test_history_never_reads_pipes_or_devices(tmp_path, whole, what):
    """A FIFO blocked History.load forever; a link to /dev/zero read until the OOM killer
    (15.7 GB). Now such a folder is listed as damaged, unread, and the others load."""
    folder = _saved(tmp_path, whole)
    d = _folder_of(folder, "odd")
    name = what.split()[-1] if "fifo" in what else what.split()[0]
    (d / name).unlink()
    if "fifo" in what:
        os.mkfifo(d / name)
    else:
        os.symlink("/dev/zero", d / name)
    h = History.load(folder)
    assert [r.run_id for r in h.runs] == ["good"]
    assert h.damaged and "not a regular file" in h.damaged[0][1], h.damaged


def test_a_failed_save_keeps_the_run_with_a_warning(tmp_path, whole):
    folder = tmp_path / "runs"
    h = History(folder)
    folder.write_text("the folder became a file")
    with pytest.warns(RuntimeWarning, match="kept in memory"):
        run = h.add(dataclasses.replace(whole, run_id="kept"))
    assert run.run_id == "kept" and h["kept"] is run


# -- Lab arguments (checked before any process starts) -------------------------------------

@pytest.mark.parametrize("n, words", [(0, "at least 1"), (-1, "at least 1"),
                                      (1.5, "whole number"), ("2", "whole number"),
                                      (True, "whole number"), (10**6, "GB")])
def test_lab_n_is_refused_before_anything_starts(n, words):
    with pytest.raises(ConfigError, match=words) as e:
        Lab(n=n, history=None)
    assert f"Lab(n={n!r})" in str(e.value) or f"Lab(n={n})" in str(e.value)


@pytest.mark.parametrize("key", ["timeout", "pg_timeout", "start_timeout"])
@pytest.mark.parametrize("value", ["10", 0, float("nan"), -1, float("inf")])
def test_lab_time_limits_are_refused_before_anything_starts(key, value):
    with pytest.raises(ConfigError, match=f"{key}="):
        Lab(n=2, history=None, **{key: value})


def test_lab_history_that_cannot_be_written_is_refused_before_the_run(tmp_path):
    f = tmp_path / "runs"
    f.write_text("a file")
    with pytest.raises(ConfigError, match="is a file"):
        Lab(n=2, history=f)
    with pytest.raises(ConfigError, match="cannot be written"):
        Lab(n=2, history=f / "sub")
    with pytest.raises(ConfigError, match="cannot be written"):   # root can't write /proc
        Lab(n=2, history="/proc/nbtools-runs")


# -- exports -------------------------------------------------------------------------------

def test_export_with_lone_surrogates_writes_the_page(tmp_path, whole):
    """A lone surrogate in notes, title or a run's error text: UnicodeEncodeError after the
    whole page was built, nothing written."""
    run = dataclasses.replace(whole, errors={0: "failed in /data/\udcff.bin"}, status="failed")
    out = export_html(tmp_path / "r.html", [run], notes="from \ud800 file", title="t \udc80")
    page = out.read_text(encoding="utf-8")
    assert "from ? file" in page and "failed in /data/?.bin" in page


def _notebook(p: Path, first_cell: str = "SIZE = 1") -> Path:
    import nbformat
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell(first_cell)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("print(SIZE)")]
    nbformat.write(nb, str(p))
    return p


@pytest.mark.parametrize("flag", ["-o", "--save-ipynb"])
def test_export_refuses_to_overwrite_the_notebook(tmp_path, capsys, flag):
    from nbtools.cli.main import main
    nb = _notebook(tmp_path / "nb.ipynb")
    before = nb.read_bytes()
    argv = ["export", str(nb), "--no-execute", flag, str(nb)]
    if flag != "-o":
        argv = ["export", str(nb), flag, str(tmp_path / "." / "nb.ipynb")]
    assert main(argv) == 2
    assert "replace the notebook" in capsys.readouterr().err
    assert nb.read_bytes() == before


def test_export_param_must_name_a_parameter(tmp_path, capsys):
    from nbtools.cli.main import main
    nb = _notebook(tmp_path / "nb.ipynb")
    assert main(["export", str(nb), "-p", "SIZ=2"]) == 2
    err = capsys.readouterr().err
    assert "SIZ (did you mean SIZE?)" in err and "parameters cell" in err
    assert not (tmp_path / "nb.html").exists()


@pytest.mark.timeout(180)
def test_a_kernel_death_names_the_cell(tmp_path):
    """The kernel died in the first cell: "stopped at cell None"."""
    from nbtools.report.notebook import NotebookStopped, execute
    nb = _notebook(tmp_path / "nb.ipynb", "import os\nos._exit(1)")
    with pytest.raises(NotebookStopped) as e:
        execute(nb, kernel_name="python3", timeout=120)
    assert "stopped at cell 0" in str(e.value) and "kernel died" in str(e.value)
    assert "None" not in str(e.value)
