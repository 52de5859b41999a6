"""Issue 36 (lines 4-7) and issue 34 (line 6): outputs never over inputs; nothing skipped,
emptied or dropped without its name and reason; odd history values flagged and kept out of
verdicts; the Lab's remaining arguments as ConfigErrors. No engines: the command line runs
in this process (main(), real files, FIFOs, links and devices), the Lab is refused before
anything starts."""
from __future__ import annotations

import dataclasses
import gzip
import json
import math
import os
import re
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from nbtools import Lab, load_traces
from nbtools.analysis import flags as F
from nbtools.config.step_config import ConfigError, StepConfig
from nbtools.results.history import History
from nbtools.results.load import TraceError
from support.cli import cli, one_line
from support.paths import H200

OFF = [H200 / f"tp_off_rank{r}.json.gz" for r in (0, 1)]
RO = [H200 / f"tp_reduce-overhead_rank{r}.json.gz" for r in (0, 1)]





@pytest.fixture
def traces(tmp_path) -> Path:
    d = tmp_path / "traces"
    d.mkdir()
    for f in OFF:
        shutil.copy(f, d)
    return d


def _doc(f=OFF[0]) -> dict:
    return json.loads(gzip.open(f).read())


# -- 36.4: no output over an input, a notebook or a saved run; checked before the work ------

def test_outputs_never_replace_the_traces_being_read(tmp_path, capsys, traces):
    t = traces / OFF[0].name
    before = t.read_bytes()
    for args in (["view", t, "--perfetto", t], ["view", traces, "--html", t],
                 ["view", t, traces / OFF[1].name, "--html", t]):
        rc, out, err = cli(capsys, *args)
        assert rc == 2 and "is one of the files being read" in one_line(err), err
        assert out == ""          # refused before any work: no table printed
    assert t.read_bytes() == before
    # --force does not make an input an output
    rc, _, err = cli(capsys, "view", t, "--perfetto", t, "--force")
    assert rc == 2 and t.read_bytes() == before


def test_view_html_never_writes_into_a_run_it_reads(tmp_path, capsys):
    """`view HISTORY --html HISTORY/<run>/summary.parquet --force` wrote the report over
    the run's table (the run was then damaged); a trace being read was already refused.
    Inside a run folder it reads, no name is taken, --force or not."""
    h, run = History(tmp_path / "h"), load_traces(OFF)
    h.add(run)
    folder = run.folder
    table = folder / "summary.parquet"
    before = table.read_bytes()
    for target, force in ((table, ["--force"]), (table, []), (folder / "report.html", [])):
        rc, out, err = cli(capsys, "view", h.folder, "--html", target, *force)
        assert rc == 2 and f"is inside {folder}, a saved run" in one_line(err), err
        assert out == "" and not (folder / "report.html").exists()
    # `run` writes into the history it names: refused the same, before any engine starts
    rc, out, err = cli(capsys, "run", "--history", h.folder, "--html", table, "--force")
    assert rc == 2 and f"is inside {folder}, a saved run" in one_line(err), err
    assert table.read_bytes() == before
    loaded = History.load(h.folder)
    assert len(loaded) == 1 and not loaded.damaged
    rc, out, err = cli(capsys, "view", h.folder, "--html", h.folder / "report.html")
    assert rc == 0 and (h.folder / "report.html").exists(), err   # beside the runs is fine
    assert len(History.load(h.folder)) == 1


def test_outputs_never_replace_a_notebook_or_a_trace_without_force(tmp_path, capsys, traces):
    nb = tmp_path / "analysis.ipynb"
    nb.write_text('{"cells": []}')
    other = tmp_path / "other_rank0.json"
    other.write_text(json.dumps(_doc()))
    for target, says in ((nb, "is a notebook"), (other, "is a profiler trace")):
        rc, out, err = cli(capsys, "view", traces, "--perfetto", target)
        assert rc == 2 and says in one_line(err) and "--force" in err and out == ""
    assert nb.read_text() == '{"cells": []}'
    rc, out, err = cli(capsys, "view", traces, "--perfetto", nb, "--force")
    assert rc == 0 and "traceEvents" in nb.read_text(), err


def test_run_html_never_replaces_a_notebook(tmp_path, capsys):
    nb = tmp_path / "a.ipynb"
    nb.write_text("{}")
    rc, out, err = cli(capsys, "run", "--html", nb, "--history", tmp_path / "h")
    assert rc == 2 and "is a notebook" in one_line(err) and nb.read_text() == "{}"


def test_one_path_for_two_outputs_is_refused(tmp_path, capsys, traces):
    rc, out, err = cli(capsys, "view", traces, "--html", tmp_path / "x", "--perfetto",
                       tmp_path / "x")
    assert rc == 2 and "also --html's file" in one_line(err) and not (tmp_path / "x").exists()


@pytest.mark.parametrize("target, says", [
    ("/dev/full", "is a device, not a file to write to"),
    ("/proc/report.html", "folder /proc cannot be written"),
    ("nowhere/report.html", "folder nowhere does not exist")])
def test_a_target_that_cannot_be_written_is_one_line_before_the_work(capsys, traces, target,
                                                                     says):
    rc, out, err = cli(capsys, "view", traces, "--html", target)
    assert rc == 2 and says in one_line(err) and out == ""


def test_a_write_that_fails_after_the_checks_is_one_line(tmp_path, capsys, traces):
    """The disk fills up while writing (here: a file-size limit of 16 KB, the same EFBIG a
    quota gives): one line naming the file, exit 2, no traceback."""
    import resource
    import signal
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # else the signal kills us
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 10, old_limit[1]))
    try:
        rc, out, err = cli(capsys, "view", traces, "--perfetto", tmp_path / "all.json")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
    assert rc == 2 and "all.json: could not be written (File too large)" in one_line(err)


def test_to_perfetto_never_replaces_a_notebook_or_the_saved_run(tmp_path):
    run = load_traces(OFF[0])
    nb = tmp_path / "n.ipynb"
    nb.write_text("{}")
    with pytest.raises(FileExistsError, match="is a notebook.*force=True"):
        run.to_perfetto(nb)
    assert nb.read_text() == "{}"
    assert run.to_perfetto(nb, force=True) == nb and "traceEvents" in nb.read_text()
    h = History(tmp_path / "h")
    h.add(run)
    with pytest.raises(FileExistsError, match="a file of the saved run"):
        run.to_perfetto(run.folder / "run.json")
    assert len(History.load(tmp_path / "h")) == 1     # the saved run still loads


def test_view_skips_its_own_perfetto_file_in_the_traces_folder(capsys, traces):
    rc, out, err = cli(capsys, "view", traces, "--perfetto", traces / "all_ranks.json")
    assert rc == 0 and (traces / "all_ranks.json").exists(), err
    rc, out, err = cli(capsys, "view", traces)
    assert rc == 0, err
    assert "all_ranks.json: was written by nbtools (to_perfetto)" in err
    assert "(rank 0: tp_off_rank0.json.gz, rank 1: tp_off_rank1.json.gz)" in out


# -- 36.5: everything skipped, emptied or dropped is named with its reason -----------------

def test_pipes_devices_and_loops_named_like_traces_are_skipped_and_named(tmp_path, capsys):
    d = tmp_path / "t"
    d.mkdir()
    shutil.copy(OFF[0], d)
    os.mkfifo(d / "rank1.json")
    os.symlink("/dev/zero", d / "rank2.json")
    os.symlink("rank3.json", d / "rank3.json")        # a link to itself
    rc, out, err = cli(capsys, "view", d)
    assert rc == 0, err
    for name, why in (("rank1.json", "a pipe (FIFO)"), ("rank2.json", "a device"),
                      ("rank3.json", "a link that loops")):
        line = f"{name}: is {why}"
        assert line in err and line in out, (line, err)
    assert "world_size 2 but 1 rank(s) were read: rank(s) 1 have no trace here" in err
    run = load_traces(d)
    assert sum(": skipped" in f for f in run.flags) == 3, run.flags


@pytest.mark.parametrize("make, says", [
    (lambda p: os.mkfifo(p), "is a pipe (FIFO), not a trace file"),
    (lambda p: os.symlink("/dev/zero", p), "is a device (a link to /dev/zero), not a trace file"),
    (lambda p: os.symlink("/proc/sys/vm/compact_memory", p), "permission denied"),
])
def test_a_named_file_that_is_no_file_says_what_it_is(tmp_path, capsys, make, says):
    make(tmp_path / "rank-0.json")
    rc, out, err = cli(capsys, "view", tmp_path / "rank-0.json")
    assert rc == 2 and says in one_line(err) and "copy it again" not in err


def test_a_fifo_without_a_trace_name_is_not_called_a_file(tmp_path, capsys):
    os.mkfifo(tmp_path / "runs")
    rc, _, err = cli(capsys, "view", tmp_path / "runs")
    assert rc == 2 and "is a pipe (FIFO), not a history folder" in one_line(err)


@pytest.mark.parametrize("events, why", [
    ([], "its traceEvents is empty"),
    ([{"ph": "Q", "name": "a", "ts": 1, "pid": 1, "tid": 1}] * 3,
     "none of its 3 entries is a timed span"),
])
def test_a_trace_with_no_events_fails_with_its_reason(tmp_path, capsys, events, why):
    p = tmp_path / "rank-0.json"
    p.write_text(json.dumps({"traceEvents": events}))
    rc, out, err = cli(capsys, "view", p)
    assert rc == 1
    failed = [line for line in out.splitlines() if "failed: " in line]
    assert failed and why in failed[0] and why in err, out
    run = load_traces(p)
    assert run.status == "failed" and why in run.errors[0]


def test_unknown_phases_and_odd_ids_are_flagged(tmp_path):
    doc = _doc()
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    for e in xs[::10]:
        e["ph"] = "Q"                     # 10 % of the spans: a phase the format lacks
    xs[1]["tid"], xs[2]["tid"], xs[3]["pid"] = "7", 7.5, "no digits"
    del xs[4]["tid"], xs[5]["pid"]
    p = tmp_path / "rank-0.json"
    p.write_text(json.dumps(doc))
    flags = "\n".join(load_traces(p).flags)
    n_q = len(xs[::10])
    assert f"ph is not a Trace Event Format phase in {n_q} event(s), e.g. 'Q': skipped" in flags
    assert "tid is text or a fraction, not an integer in 2 event(s)" in flags
    assert "pid is not an integer within int64 in 1 event(s), e.g. 'no digits'" in flags
    assert "tid is missing in 1 event(s)" in flags and "pid is missing in 1 event(s)" in flags
    # a real Kineto trace's own "PyTorch Profiler" span (pid "Spans") is not damage
    assert not [f for f in load_traces(OFF[0]).flags if "pid" in f or "tid" in f]


def test_escape_sequences_in_names_never_reach_the_terminal(tmp_path, capsys):
    d = tmp_path / "t"
    d.mkdir()
    shutil.copy(OFF[0], d / "rank-0\x1b[2J\x07.json.gz")
    (d / "rank-1\x1b]0;x\x07.json").write_text("{")
    rc, out, err = cli(capsys, "view", d)
    assert rc == 0 and "rank-0?[2J?.json.gz" in out and "rank-1?]0;x?.json" in err
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", out + err)
    rc, _, err = cli(capsys, "view", d / "gone\x1b[2J.json")     # an error line names it too
    assert rc == 2 and "gone?[2J.json" in one_line(err) and "\x1b" not in err


def test_two_traces_without_the_same_ranks_get_no_verdict(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    for f in OFF:
        shutil.copy(f, a)
    shutil.copy(RO[0], b)                 # rank 1's file is missing on the B side
    rc, out, err = cli(capsys, "view", a, b)
    assert rc == 1
    assert "no verdict: A holds rank(s) 0, 1 of 2, B rank(s) 0 of 2" in out
    assert "verdict (" not in out


def test_lab_n_names_the_limit_that_holds():
    from nbtools.lab import arguments
    cores = os.cpu_count() or 1
    most = min(int(arguments.available_gb() // (2 * arguments.ENGINE_GB)),
               arguments.RANKS_PER_CORE * cores)
    with pytest.raises(ConfigError) as e:
        Lab(n=arguments.RANKS_PER_CORE * cores + 1, history=None)
    said = re.search(r"at most (\d+)|n <= (\d+)", str(e.value))
    assert said and int(said.group(1) or said.group(2)) == most, str(e.value)


# -- 36.6: odd history values never break a view or an export ------------------------------

@pytest.fixture(scope="module")
def lab_like_run():
    # the summary is what is checked; without events the report draws no timeline (tens of
    # seconds for eleven runs on a shared core), while started and world_size still reach
    # the code that overflowed
    run = load_traces(OFF[0])
    run.summary["step_ms"], run.summary["host_load"] = 2.5, 0.5
    return dataclasses.replace(run, config=StepConfig(compile="default"), source="lab",
                               events=run.events.iloc[:0], event_details=run.event_details)


MUTATIONS = {      # what a person, a tool or a bad disk wrote -> the words of its flag
    "step_ms nan": (("summary", "step_ms", math.nan), "missing in a run that finished"),
    "step_ms inf": (("summary", "step_ms", math.inf), "not finite"),
    "step_ms 1e308": (("summary", "step_ms", 1e308), "beyond"),
    "step_ms negative": (("summary", "step_ms", -1.0), "negative"),
    "step_ms text": (("summary", "step_ms", "fast"), "text, not a number"),
    "host_load 1e308": (("summary", "host_load", 1e308), "beyond"),
    "host_load -inf": (("summary", "host_load", -math.inf), "not finite"),
    "started 1e308": (("started", None, 1e308), "not a time between 1970 and 9999"),
    "world_size 10**30": (("env", "world_size", 10**30), "not a whole number"),
    "world_size 1e308": (("env", "world_size", 1e308), "not a whole number"),
}


def _mutated(base, name):
    (where, key, value), _ = MUTATIONS[name]
    run = dataclasses.replace(base, run_id=name.replace(" ", "_"), summary=base.summary.copy(),
                              env=dict(base.env))
    if where == "summary":
        if isinstance(value, str):
            run.summary[key] = run.summary[key].astype(object)
        run.summary.loc[0, key] = value
    elif where == "started":
        run.started = value
    else:
        run.env[key] = value
    return run


def test_odd_history_values_are_flagged_and_kept_out_of_verdicts(tmp_path, capsys,
                                                                 lab_like_run):
    """Every mutation in one history, beside a good run that loads untouched."""
    h = History(tmp_path / "h")
    h.add(dataclasses.replace(lab_like_run, run_id="good"))
    for name in MUTATIONS:
        h.add(_mutated(lab_like_run, name))
    loaded = History.load(tmp_path / "h")
    assert len(loaded) == len(MUTATIONS) + 1 and not loaded.damaged
    good, *odd = loaded.runs
    assert not [f for f in good.flags if F.identify(f) == "odd-value"]
    for name, run in zip(MUTATIONS, odd):
        (where, key, _), why = MUTATIONS[name]
        said = [f for f in run.flags if F.identify(f) == "odd-value"]
        assert len(said) == 1 and why in said[0] and (key or where) in said[0], (name, run.flags)
        if where == "summary":     # NaN: what every verdict leaves out
            v = run.summary[key]
            assert math.isnan(v.iloc[0]) and v.dtype == np.float64, name
            assert v.iloc[1:].notna().all() if len(v) > 1 else True
    # the view and the report (export_html) of those that broke them (a traceback, an
    # OverflowError) and the good run: each shown, each flagged (seconds per run in the
    # report on a shared core, so not all eleven)
    broke = ["step_ms text", "started 1e308", "world_size 1e308"]
    h = History(tmp_path / "v")
    for run in [dataclasses.replace(lab_like_run, run_id="good")] + \
            [_mutated(lab_like_run, name) for name in broke]:
        h.add(run)
    rc, out, err = cli(capsys, "view", tmp_path / "v", "--html", tmp_path / "v.html")
    assert rc == 0 and err.count("odd value: ") == len(broke), err
    assert out.count("! odd value: ") == len(broke) and (tmp_path / "v.html").exists()


def test_an_absurd_step_time_is_left_out_of_the_verdict(tmp_path, lab_like_run):
    """A B B A rounds saved and loaded back, one B run's step_ms edited to 1e308: the verdict
    drops that round and says so (it read "B/A within 1.00-9.19e+305")."""
    from nbtools import Comparison
    a, b = StepConfig(compile="off"), StepConfig(compile="default")
    h = History(tmp_path / "h")
    for i, (cfg, ms) in enumerate([(a, 2.5), (b, 2.0), (b, 1e308), (a, 2.6),
                                   (a, 2.55), (b, 2.05), (b, 2.02), (a, 2.52),
                                   (a, 2.51), (b, 2.03), (b, 2.01), (a, 2.58)]):
        s = lab_like_run.summary.copy()
        s["step_ms"] = ms
        h.add(dataclasses.replace(lab_like_run, run_id=f"r{i}", config=cfg, summary=s))
    runs = History.load(tmp_path / "h").runs
    v = Comparison.from_rounds([r for r in runs if r.config == a],
                               [r for r in runs if r.config == b]).verdict
    assert "1 of 3 rounds dropped" in v.text and "e+" not in v.text, v.text
    assert v.high < 10


def test_history_load_of_a_non_path_is_a_config_error():
    with pytest.raises(ConfigError, match=r"History.load\(5\): give the folder"):
        History.load(5)


def test_a_run_folder_linked_twice_loads_once(tmp_path, capsys, lab_like_run):
    h = History(tmp_path / "h")
    h.add(lab_like_run)
    (real,) = [p for p in (tmp_path / "h").iterdir() if p.name[0].isdigit()]
    os.symlink(real.name, tmp_path / "h" / "0000-alias")   # sorts first, still a link
    loaded = History.load(tmp_path / "h")
    assert len(loaded) == 1 and loaded.runs[0].folder.name == real.name
    assert loaded.skipped == [("0000-alias", f"the same folder as {real.name} (a link to "
                                             "it): loaded once, as that")]
    rc, out, err = cli(capsys, "view", tmp_path / "h")
    assert rc == 0 and "skipped run folder 0000-alias" in err


# -- 36.7: the Lab's remaining arguments, refused before anything starts -------------------

def _unstarted_cluster(tmp_path):
    import ipyparallel as ipp
    return ipp.Cluster(n=0, profile_dir=str(tmp_path / "profile"))


@pytest.mark.parametrize("kw, says", [
    (lambda t: dict(engines="bogus"), "not an ipyparallel engine launcher; give one of "),
    (lambda t: dict(engines=5), "give a launcher's name"),
    (lambda t: dict(cluster=object()), "give a started ipyparallel Cluster or a Client"),
    (lambda t: dict(cluster=_unstarted_cluster(t)), "has not been started; call "
                                                    "cluster.start_cluster_sync()"),
], ids=["engines=bogus", "engines=5", "cluster=object", "cluster=unstarted"])
def test_lab_arguments_answer_with_config_error(tmp_path, kw, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        Lab(history=None, **kw(tmp_path))


def test_every_launcher_ipyparallel_takes_is_still_accepted():
    """The check must not refuse what ipyparallel would start: its names in any case, and a
    launcher class by import path (a wrong one of those was a TraitError too)."""
    from nbtools.lab.arguments import check_engines
    from nbtools.lab.hosts import SSH
    for ok in ("local", "MPI", "slurm", "ssh", SSH({"node1": 2}), {"node1": 2},
               "ipyparallel.cluster.launcher.MPIEngineSetLauncher"):
        check_engines(ok)
    with pytest.raises(ConfigError, match="not an ipyparallel engine launcher"):
        check_engines("ipyparallel.cluster.launcher.NoSuchLauncher")


def test_an_unpicklable_step_is_a_config_error():
    from nbtools.config.workload import to_payload
    lock = threading.Lock()

    def step(ctx):
        return lock

    with pytest.raises(ConfigError, match=r"step: cannot be sent to the engines .*_thread.lock"):
        to_payload(step)



def test_a_step_that_sets_a_dynamo_config_travels_once_dynamo_is_loaded(tmp_path):
    """CI failure (lab.explore's tests in the full suite): once torch._dynamo is imported
    in the notebook, a by-value step or model that writes ``torch._dynamo.config.x`` took
    the config module along, and torch's config modules cannot be pickled."""
    import subprocess
    import sys

    import torch._dynamo  # noqa: F401  (the state of a notebook that has compiled once)
    from nbtools.config.workload import to_payload

    def step(ctx):
        torch._dynamo.config.recompile_limit = 77
        return torch._dynamo.config.recompile_limit

    payload = to_payload(step)
    engine = subprocess.run(        # another process, in a folder without this test file
        [sys.executable, "-c", "import pickle, sys; "
         "print(pickle.loads(sys.stdin.buffer.read())(None))"],
        input=payload, capture_output=True, cwd=tmp_path, timeout=120)
    assert engine.returncode == 0, engine.stderr.decode()[-2000:]
    assert engine.stdout.decode().strip() == "77"

# -- 34.6: one rank-less trace in a folder; the legend on --explain ------------------------

def test_a_folder_with_one_rankless_trace_reads_it_as_rank_0(tmp_path, capsys):
    doc = _doc()
    doc.pop("distributedInfo")
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "host_1234.1700000000.pt.trace.json").write_text(json.dumps(doc))
    rc, out, err = cli(capsys, "view", tmp_path / "job")
    assert rc == 0, err
    assert out.count("the trace says no rank") == 1 and "shown as rank 0" in out
    assert re.search(r"^\s+0\s+\d", out, re.M), out


def test_the_column_legend_is_printed_on_explain_only(capsys, traces):
    rc, out, _ = cli(capsys, "view", traces)
    assert rc == 0 and "columns: `nbtools view --explain ...`" in out
    assert "exposed_comm_ms (ms):" not in out
    rc, out, _ = cli(capsys, "view", traces, "--explain")
    assert rc == 0 and "exposed_comm_ms (ms):" in out and "--explain ...`" not in out
