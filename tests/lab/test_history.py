"""Run history on disk under damage (issue 16): one damaged run folder is listed with its
reason and every other run loads; partial runs are flagged; run.json is strict JSON;
concurrent writers never share a folder number. Pure: no engines."""
from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from nbtools import load_traces
from nbtools.config.step_config import StepConfig
from nbtools.results.history import History
from nbtools.results.run import Run, RunDamaged
from support.paths import H200, ROOT

FIXTURE = H200 / "tp_off_rank0.json.gz"


@pytest.fixture(scope="module")
def base_run() -> Run:
    run = load_traces(FIXTURE)
    assert len(run.events) and len(run.steps) and len(run.summary)
    return dataclasses.replace(run, config=StepConfig(compile="default"), source="lab")


def _history(tmp: Path, base: Run, n=3) -> tuple[Path, list[Run]]:
    folder = tmp / "runs"
    h = History(folder)
    runs = [h.add(dataclasses.replace(base, run_id=f"r{i}")) for i in range(n)]
    return folder, runs


def _folder_of(folder: Path, run_id: str) -> Path:
    (d,) = [p for p in folder.iterdir() if p.name.endswith("-" + run_id)]
    return d


def _plain(df: pd.DataFrame) -> pd.DataFrame:
    # the categories' dtype (object vs str) changes through parquet; the values must not
    return df.apply(lambda c: c.astype(str) if isinstance(c.dtype, pd.CategoricalDtype) else c)


def _truncate(p: Path):
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _replace_with_folder(p: Path):
    p.unlink()
    p.mkdir()
    (p / "x").write_text("not a table")


def _wrong_schema(p: Path):
    pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}).to_parquet(p)


def _wrong_type(p: Path):
    df = pd.read_parquet(p)
    df["ts_ns"] = "soon"
    df.to_parquet(p)


def _bad_config(p: Path):
    meta = json.loads(p.read_text())
    meta["config"]["profiled"] = 10**6    # over today's bound
    p.write_text(json.dumps(meta))


def _meta_edit(**changes):
    def edit(p: Path):
        meta = json.loads(p.read_text())
        for k, v in changes.items():
            if v is KeyError:
                del meta[k]
            else:
                meta[k] = v
        p.write_text(json.dumps(meta))
    return edit


# damage class: (file, how, where it shows: "damaged" (not loadable) or "partial", words)
DAMAGE = {
    "junk run.json": ("run.json", lambda p: p.write_text("}{ not json"), "damaged",
                      "not valid JSON"),
    "truncated run.json": ("run.json", _truncate, "damaged", "not valid JSON"),
    "empty run.json": ("run.json", lambda p: p.write_text(""), "damaged", "is empty"),
    "run.json holds a list": ("run.json", lambda p: p.write_text("[1, 2]"), "damaged",
                              "holds a list"),
    "run.json is a folder": ("run.json", _replace_with_folder, "damaged", "cannot be read"),
    "run.json deleted": ("run.json", Path.unlink, "damaged", "no run.json"),
    "run.json without run_id": ("run.json", _meta_edit(run_id=KeyError), "damaged", "run_id"),
    "run.json errors not a mapping of ranks": ("run.json", _meta_edit(errors={"x": "boom"}),
                                               "damaged", "ValueError"),
    "config invalid today": ("run.json", _bad_config, "partial", "profiled=1000000"),
    "events.parquet deleted": ("events.parquet", Path.unlink, "partial",
                               "events.parquet is missing"),
    "events.parquet truncated": ("events.parquet", _truncate, "partial",
                                 "events.parquet cannot be read"),
    "events.parquet empty": ("events.parquet", lambda p: p.write_bytes(b""), "partial",
                             "events.parquet cannot be read"),
    "events.parquet is a folder": ("events.parquet", _replace_with_folder, "partial",
                                   "events.parquet is not a file"),
    "events.parquet wrong schema": ("events.parquet", _wrong_schema, "partial",
                                    "events.parquet lacks the column(s) rank"),
    "events.parquet wrong type": ("events.parquet", _wrong_type, "partial",
                                  "events.parquet has a column of the wrong type"),
    "steps.parquet deleted": ("steps.parquet", Path.unlink, "partial", "steps.parquet is missing"),
    "summary.parquet wrong schema": ("summary.parquet", _wrong_schema, "partial",
                                     "summary.parquet has no rank column"),
    "compile_events.parquet junk": ("compile_events.parquet",
                                    lambda p: p.write_bytes(b"PAR1 junk PAR1"), "partial",
                                    "compile_events.parquet cannot be read"),
    "reports.parquet junk": ("reports.parquet", lambda p: p.write_bytes(b"junk"), "partial",
                             "reports.parquet cannot be read"),
}


@pytest.mark.parametrize("name", list(DAMAGE))
def test_one_damaged_run_never_costs_the_others(tmp_path, base_run, name):
    file, damage, shows, words = DAMAGE[name]
    folder, runs = _history(tmp_path, base_run)
    damage(_folder_of(folder, "r1") / file)

    h = History.load(folder)
    others = {r.run_id: r for r in h if r.run_id != "r1"}
    assert set(others) == {"r0", "r2"}
    for r in others.values():   # whole, as saved
        assert not r.damage and r.config == StepConfig(compile="default")
        pd.testing.assert_frame_equal(_plain(r.events), _plain(base_run.events))
    table = h.table
    if shows == "damaged":
        assert [n for n, _ in h.damaged] == [_folder_of(folder, "r1").name]
        assert words in h.damaged[0][1], h.damaged[0][1]
        row = table[table["status"] == "damaged"].iloc[0]
        assert words in row["label"]
    else:
        assert not h.damaged
        r1 = h["r1"]
        assert r1.damage and any(words in f for f in r1.damage), r1.damage
        assert words in table.set_index("run").loc["r1", "damage"]
        if name.startswith("events"):   # never silently 0 events: the flag says they are lost
            assert len(r1.events) == 0 and len(r1.steps) == len(base_run.steps)


def test_view_lists_every_damaged_folder_and_shows_the_rest(tmp_path, base_run):
    """`python -m nbtools view` over a folder where every damage class above hit one run."""
    folder = tmp_path / "runs"
    h = History(folder)
    for i, (file, damage, _, _) in enumerate(DAMAGE.values()):
        h.add(dataclasses.replace(base_run, run_id=f"d{i}"))
        damage(_folder_of(folder, f"d{i}") / file)
    h.add(dataclasses.replace(base_run, run_id="whole"))
    r = subprocess.run([sys.executable, "-m", "nbtools", "view", str(folder)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    n_damaged = sum(1 for v in DAMAGE.values() if v[2] == "damaged")
    assert r.stderr.count("damaged run folder") == n_damaged, r.stderr
    assert "compile=default" in r.stdout and "events.parquet is missing" in r.stdout
    loaded = History.load(folder)
    assert len(loaded) == len(DAMAGE) - n_damaged + 1 and len(loaded.damaged) == n_damaged


def test_run_load_names_the_problem(tmp_path, base_run):
    folder, _ = _history(tmp_path, base_run, n=1)
    d = _folder_of(folder, "r0")
    (d / "run.json").write_text('{"run_id": "r0", "errors": [1]')
    with pytest.raises(RunDamaged, match=r"run.json: is not valid JSON"):
        Run.load(d)


def test_run_json_is_strict_and_nan_comes_back(tmp_path, base_run):
    run = dataclasses.replace(base_run, run_id="nan",
                              ranks={0: {"peak_mb": float("nan"), "check": [1.0, float("inf")]}},
                              env={"clock_skew_ns": float("-inf"), "ok": 1.5})
    d = run.save(tmp_path / "one")
    text = (d / "run.json").read_text()

    def refuse(c):
        raise AssertionError(f"bare {c} in run.json")
    json.loads(text, parse_constant=refuse)     # strict JSON: no NaN/Infinity literals
    back = Run.load(d)
    assert math.isnan(back.ranks[0]["peak_mb"]) and back.ranks[0]["check"] == [1.0, math.inf]
    assert back.env == {"clock_skew_ns": -math.inf, "ok": 1.5}


def _writer(folder: str, tag: str, n: int, barrier) -> None:
    h = History(folder)
    barrier.wait()
    for i in range(n):
        h.add(Run(config=None, run_id=f"{tag}{i}"))


def test_two_writers_on_one_folder_never_share_a_number(tmp_path):
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), tag, 15, barrier))
             for tag in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    names = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))
    numbers = [n.split("-")[0] for n in names]
    assert len(names) == 30 and len(set(numbers)) == 30, names
    assert len(History.load(tmp_path)) == 30


def test_numbers_continue_after_damaged_and_loaded_runs(tmp_path, base_run):
    folder, _ = _history(tmp_path, base_run, n=3)
    shutil.rmtree(_folder_of(folder, "r1"))
    (folder / "0007-old").mkdir()            # a run another version left half-written
    h = History.load(folder)
    assert len(h) == 2 and [n for n, _ in h.damaged] == ["0007-old"]
    h.add(dataclasses.replace(base_run, run_id="new"))
    assert _folder_of(folder, "new").name == "0008-new"


def test_missing_folder_is_an_empty_history(tmp_path):
    h = History.load(tmp_path / "nothing-here")
    assert len(h) == 0 and not h.damaged and h.table.empty


@pytest.mark.slow
def test_lab_opens_a_damaged_history_and_keeps_saving(tmp_path, base_run):
    """Lab(history=...) on real engines: the damaged folder is listed, the whole runs are
    there, and the lab's own run is saved under the next free number, as strict JSON."""
    from nbtools import Lab
    folder, _ = _history(tmp_path, base_run, n=2)
    (_folder_of(folder, "r0") / "run.json").write_text("{")
    with Lab(n=1, history=folder, timeout=240, pg_timeout=120) as lab:
        assert [r.run_id for r in lab.history] == ["r1"]
        assert [n for n, _ in lab.history.damaged] == [_folder_of(folder, "r0").name]
        run = lab.run(StepConfig(warmup=1, steps=2, profiled=1))
        assert run.ok, run.errors
    saved = _folder_of(folder, run.run_id)
    assert saved.name.startswith("0002-")
    json.loads((saved / "run.json").read_text(),
               parse_constant=lambda c: pytest.fail(f"bare {c} in run.json"))
    again = History.load(folder)
    assert [r.run_id for r in again] == ["r1", run.run_id] and len(again.damaged) == 1
    assert len(again[run.run_id].events) == len(run.events) > 0


def test_a_key_that_names_no_run_says_which_ones_there_are():
    """issue 44: History[None] raised a bare TypeError, History[99] "list index out of
    range"; each now names the ids there are (and an empty history says so)."""
    import pytest
    from nbtools.results.history import History
    from nbtools.results.run import Run
    h = History(None)
    with pytest.raises(IndexError, match=r"History\[0\]: this history is empty: lab.run"):
        h[0]
    for i in range(15):
        h.add(Run(config=None, run_id=f"{i:08x}"))
    assert h[-1].run_id == "0000000e" and [r.run_id for r in h[1:3]] == ["00000001", "00000002"]
    with pytest.raises(TypeError, match=r"History\[None\]: give a run's id \(a str\) or its "
                                        r"position .*ids, oldest first: 00000000, 00000001, "
                                        r"00000002, \.\.\. \(3 more\), 00000006"):
        h[None]
    with pytest.raises(IndexError, match=r"History\[99\]: this history holds 15 run\(s\), at "
                                         r"positions 0 to 14 \(or -1 to -15 from the newest\)"
                                         r".*0000000e$"):
        h[99]
    with pytest.raises(KeyError, match="no run with id 'nope' in this history; ids"):
        h["nope"]
    with pytest.raises(TypeError, match=r"History\[2.0\]"):
        h[2.0]
