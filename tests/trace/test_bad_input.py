"""Bad input loses nothing (issue 27): the red-team failures left after issue 16, each with
its test. No engines here (tests/lab/test_bad_input_lab.py has the ones that need a lab): trace
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
from support.paths import ROOT

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


def _gzip_padded(p: Path, pieces: list) -> Path:
    """A gzip of the pieces, each an int (that many MB of blanks) or bytes."""
    z, block = zlib.compressobj(1, zlib.DEFLATED, 31), b" \n" * (1 << 19)
    with open(p, "wb") as fh:
        for piece in pieces:
            for chunk in [block] * piece if isinstance(piece, int) else [piece]:
                fh.write(z.compress(chunk))
        fh.write(z.flush())
    return p


# the child loads the unpadded trace first, so what the padded one adds to its peak RSS is
# the padding's doing, not the import's or the columns'
_PEAK = """import json, resource, sys
from nbtools import load_traces
from nbtools.results.load import TraceError
n = len(load_traces(sys.argv[1]).events)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    said = len(load_traces(sys.argv[2]).events)
except TraceError as e:
    said = str(e)
print(json.dumps([n, said, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10]))
"""


def _peak(tmp: Path, padded: Path):
    import subprocess
    import sys
    plain = tmp / "plain.json"
    plain.write_bytes(json.dumps(DOC).encode())
    out = subprocess.run([sys.executable, "-c", _PEAK, str(plain), str(padded)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_blanks_between_events_stream_in_bounded_memory(tmp_path):
    """A 0.5 MB .json.gz with blanks inside its events array was held whole once gunzipped
    (1.6 GB RSS; 2 GB of blanks: 6.4 GB). 200 MB of them after '[', between events (before
    and after a comma) and before ']' now stream past: the trace loads, the peak grows by
    far less than the blanks."""
    head = json.dumps({k: v for k, v in DOC.items() if k != "traceEvents"})[:-1]
    ev = [json.dumps(e).encode() for e in DOC["traceEvents"]]
    a, b = len(ev) // 3, 2 * len(ev) // 3
    p = _gzip_padded(tmp_path / "rank-0.json.gz", [
        head.encode() + b', "traceEvents": [', 50, b",".join(ev[:a]), 50,
        b"," + b",".join(ev[a:b]) + b",", 50, b",".join(ev[b:]), 50, b"]}"])
    assert p.stat().st_size < 2 << 20
    n, said, grew_mb = _peak(tmp_path, p)
    assert said == n, said
    assert grew_mb < 60, f"peak RSS grew {grew_mb} MB for 200 MB of blanks"


def test_blanks_inside_an_event_are_refused_at_a_bound(tmp_path):
    """Blanks that cannot be skipped (inside an event) are held: past scan.MAX_HELD_BLANK
    the file is refused with its name and the bound, before they take the memory."""
    text = json.dumps(DOC).encode()
    at = text.index(b'"ph":', len(text) // 2) + 5
    p = _gzip_padded(tmp_path / "rank-0.json.gz", [text[:at], 200, text[at:]])
    _, said, grew_mb = _peak(tmp_path, p)
    assert str(p) in said and "more than 64 MB of blanks in a row inside an event" in said
    assert grew_mb < 150, f"peak RSS grew {grew_mb} MB"


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
