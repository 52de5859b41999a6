"""Damaged traces (issue 16): every mutant of a real trace loads (damage flagged) or is a
TraceError that says what is wrong; never another exception, never a hang.

Seeds: two HolisticTraceAnalysis traces in tests/fixtures/hta/ (see its README) and one 2 x H200 rank of our own. Mutants are
made in memory: values put into events and metadata, and bytes cut, inserted or padded.
The hypothesis deadline is a hang guard (a 7 KB trace loads in ~0.05 s), not a speed test;
speed on padded input is benchmarks/bench_trace_scan.py."""
from __future__ import annotations

import copy
import gzip
import json
import math
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from nbtools.trace import read_json as trace_json
from nbtools.results.load import TraceError, load_traces
from support.paths import FIXTURES, H200

FIX = FIXTURES
SEEDS = {  # name -> (document, rank= to pass: None where the trace says it)
    "amd": (FIX / "hta" / "amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz", 0),
    "cpu": (FIX / "hta" / "cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", None),
    "h200": (H200
             / "tp_reduce-overhead_rank0.json.gz", None),
}
DOCS = {k: json.loads(gzip.open(p).read()) for k, (p, _) in SEEDS.items()}
FUZZ = settings(max_examples=200, deadline=timedelta(seconds=20),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

BIG = st.sampled_from([2**63, 2**64, 2**70, -2**63 - 1, 10**30, 1e30, -1e30, 1e308, 2**53 + 1])
VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), BIG,
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
              st.sampled_from(["", "rank", "7", "-1", "1.7", "\ud800", "X", "ProfilerStep#1",
                               "ProfilerStep#" + "9" * 30, "}, {", '"traceEvents": ['])),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=6)
EVENT_FIELDS = ["ts", "dur", "pid", "tid", "name", "cat", "ph", "args", "id"]
TOP_FIELDS = ["baseTimeNanoseconds", "distributedInfo", "traceEvents", "deviceProperties",
              "schemaVersion", "displayTimeUnit"]
DIST_FIELDS = ["rank", "world_size", "backend"]


def _load(tmp: Path, data: bytes, seed: str, name="rank-0.json"):
    """The run or the TraceError; anything else fails the test."""
    p = tmp / name
    p.write_bytes(data)
    try:
        run = load_traces(p, rank=SEEDS[seed][1])
    except TraceError as e:
        msg = str(e)
        assert str(p) in msg or p.name in msg, msg   # names the file
        assert len(msg) < 2000
        _event("TraceError: " + msg.split(": ", 1)[1][:30])
        return None
    ev = run.events
    assert ev["ts_ns"].dtype == np.int64 and (ev["dur_ns"] >= 0).all()
    assert all(isinstance(f, str) for f in run.flags)
    _event("loaded" + (", damage flagged" if any(" event(s), e.g. " in f or "is not" in f
                                                  for f in run.flags) else ""))
    return run


def _event(what: str) -> None:
    if currently_in_test_context():   # outcomes per property: --hypothesis-show-statistics
        event(what)


def _dumps(doc) -> bytes:
    # allow_nan: Python's json writes NaN/Infinity; the reader must cope with what it wrote
    return json.dumps(doc, allow_nan=True).encode()


@st.composite
def doc_mutants(draw):
    seed = draw(st.sampled_from(sorted(DOCS)))
    doc = copy.deepcopy(DOCS[seed])
    events = doc["traceEvents"]
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.sampled_from(["event", "event", "event", "args", "top", "dist"]))
        value = draw(VALUES)
        if where in ("event", "args") and isinstance(doc.get("traceEvents"), list) and events:
            e = events[draw(st.integers(0, len(events) - 1))]
            if where == "args":
                e = e.setdefault("args", {}) if isinstance(e.get("args"), dict) else e
                key = draw(st.sampled_from(["correlation", "External id", "stream", "device"]))
            else:
                key = draw(st.sampled_from(EVENT_FIELDS))
            if draw(st.booleans()) and key in e:
                del e[key]
            else:
                e[key] = value
        elif where == "top":
            key = draw(st.sampled_from(TOP_FIELDS))
            doc[key] = value
        else:
            di = doc.get("distributedInfo")
            if not isinstance(di, dict):
                di = doc["distributedInfo"] = {}
            di[draw(st.sampled_from(DIST_FIELDS))] = value
    return seed, doc


@FUZZ
@given(doc_mutants())
def test_mutated_values_load_or_say_what_is_wrong(tmp_path, mutant):
    seed, doc = mutant
    _load(tmp_path, _dumps(doc), seed)


@st.composite
def byte_mutants(draw):
    seed = draw(st.sampled_from(sorted(DOCS)))
    data = bytearray(json.dumps(DOCS[seed], indent=draw(st.sampled_from([None, 1]))).encode())
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        how = draw(st.sampled_from(["cut", "insert", "flip", "pad", "delete"]))
        if how == "cut":
            del data[at:]
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8) | st.sampled_from(
                [b"}", b"{", b"]", b"[", b",", b'"', b"\\", b"}, {", b"NaN", b"\x00"]))
        elif how == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif how == "pad":
            data[at:at] = draw(st.sampled_from([b" ", b"\n", b"\t", b"\r\n"])) * \
                draw(st.integers(1, 300_000))
        else:
            del data[at:at + draw(st.integers(1, 64))]
    packing = draw(st.sampled_from(["plain", "gzip", "gzip-cut", "two-members"]))
    if packing == "gzip":
        data = gzip.compress(bytes(data), 1)
    elif packing == "gzip-cut":
        z = gzip.compress(bytes(data), 1)
        data = z[:draw(st.integers(0, len(z)))]
    elif packing == "two-members":
        data = gzip.compress(bytes(data[:at]), 1) + gzip.compress(bytes(data[at:]), 1)
    return seed, bytes(data)


@FUZZ
@given(byte_mutants(), st.sampled_from([97, 4096, 256 << 10]))
def test_damaged_bytes_load_or_say_what_is_wrong(tmp_path, monkeypatch, mutant, chunk):
    monkeypatch.setattr(trace_json, "_CHUNK", chunk)   # cut boundaries everywhere
    seed, data = mutant
    _load(tmp_path, data, seed)


# --- the classes the fault-injection pass of issue 16 found, one by one ----------------

H200 = DOCS["h200"]


def _x_events(doc):
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def _mutant(edit):
    doc = copy.deepcopy(H200)
    edit(doc)
    return _dumps(doc)


def _set_event(key, value, n=0):
    def edit(doc):
        _x_events(doc)[n][key] = value
    return edit


def _set_args(key, value):
    def edit(doc):
        _x_events(doc)[5].setdefault("args", {})[key] = value
    return edit


def _set_top(*path, value):
    def edit(doc):
        d = doc
        for k in path[:-1]:
            d = d.setdefault(k, {})
        d[path[-1]] = value
    return edit


LOADS_FLAGGED = {  # edit -> words in a flag
    "name is a list": (_set_event("name", [1, 2]), "name is not text"),
    "name is a dict": (_set_event("name", {"a": 1}), "name is not text"),
    "cat is a list": (_set_event("cat", ["kernel"]), "cat is not text"),
    "ts is a dict": (_set_event("ts", {"us": 1}), "ts is not a finite number"),
    "ts is a list": (_set_event("ts", [1, 2], n=3), "ts is not a finite number"),
    "ts is text": (_set_event("ts", "soon"), "ts is not a finite number"),
    "ts 1e30": (_set_event("ts", 1e30), "e.g. 1e+30: dropped"),
    "ts null": (_set_event("ts", None), "e.g. None: dropped"),
    "ts deleted": (lambda d: _x_events(d)[2].pop("ts"), "ts is missing in 1 event(s)"),
    "ts NaN": (_set_event("ts", math.nan), "e.g. nan: dropped"),
    "dur 1e30": (_set_event("dur", 1e30), "dur is not a finite number"),
    "pid beyond int64": (_set_event("pid", 2**64 - 1), "pid is not an integer within int64"),
    "tid beyond int64": (_set_event("tid", 2**63), "tid is not an integer within int64"),
    "correlation beyond int64": (_set_args("correlation", 2**64 + 5),
                                 "correlation is not an integer within int64"),
    "world_size text": (_set_top("distributedInfo", "world_size", value="two"),
                        "world_size='two' is not a whole number"),
    "world_size list": (_set_top("distributedInfo", "world_size", value=[2]),
                        "world_size=a list"),
    "baseTimeNanoseconds beyond int64": (_set_top("baseTimeNanoseconds", value=2**64),
                                         "baseTimeNanoseconds=1.8446744073709552e+19 is not"),
    "baseTimeNanoseconds overflows with ts": (
        _set_top("baseTimeNanoseconds", value=2**63 - 10), "pushes the times past int64"),
    "baseTimeNanoseconds float": (_set_top("baseTimeNanoseconds", value=1.79e18),
                                  "baseTimeNanoseconds=1.79e+18 is not"),
    "lone surrogate in a name": (_set_event("name", "\ud800x"), "name is not valid Unicode"),
    "event that is not an object": (lambda d: d["traceEvents"].insert(3, [1, 2]),
                                    "traceEvents entry is not an object"),
}


@pytest.mark.parametrize("name", list(LOADS_FLAGGED))
def test_damaged_values_load_with_the_damage_flagged(tmp_path, name):
    edit, words = LOADS_FLAGGED[name]
    whole = _load(tmp_path, _dumps(H200), "h200")
    run = _load(tmp_path, _mutant(edit), "h200")
    assert run is not None
    assert any(words in f for f in run.flags), run.flags
    assert len(run.events) >= len(whole.events) - 1   # only the damaged event may go
    if "ts" in name.split()[0] or "base" in name:
        assert run.events["ts_ns"].max() < 2**63 - 1


REFUSED = {  # (edit or raw bytes) -> words in the TraceError
    "rank -1": (_set_top("distributedInfo", "rank", value=-1), "distributedInfo.rank is -1"),
    "rank 1.7": (_set_top("distributedInfo", "rank", value=1.7), "distributedInfo.rank is 1.7"),
    "rank beyond int32": (_set_top("distributedInfo", "rank", value=2**40), "from 0 to 2147483647"),
    "rank True": (_set_top("distributedInfo", "rank", value=True), "distributedInfo.rank is True"),
    "traceEvents is a dict": (_set_top("traceEvents", value={}), "not a list of events"),
    "nested too deep": (b'{"traceEvents": [' + b"[" * 5000 + b"]" * 5000 + b"]}", "too deeply"),
    "a number past Python's digit limit": (
        b'{"traceEvents": [{"ph": "X", "ts": ' + b"9" * 5000 + b"}]}", "value that cannot be read"),
    "damaged in the middle": (lambda d: None, "damaged in the middle"),
    "cut short": (lambda d: None, "it ends early"),
    "empty": (b"", "is empty"),
    "only whitespace": (b" \n" * 100_000, "is empty"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_traces_say_what_is_wrong(tmp_path, name):
    edit, words = REFUSED[name]
    data = edit if isinstance(edit, bytes) else _mutant(edit)
    if name == "damaged in the middle":   # after the comma between two keys: not in a string
        at = data.index(b'", "', len(data) // 2) + 2
        data = data[:at] + b"@@" + data[at:]
    elif name == "cut short":
        data = data[:len(data) - 300]
    with pytest.raises(TraceError, match="rank-0.json") as e:
        load_traces(_write(tmp_path, data))
    assert words in str(e.value), str(e.value)
    assert "may be truncated" not in str(e.value) or name == "cut short"


def _write(tmp: Path, data: bytes, name="rank-0.json") -> Path:
    p = tmp / name
    p.write_bytes(data)
    return p


@pytest.mark.parametrize("rank", [-1, 1.7, "1", True, 2**31, None])
def test_explicit_rank_must_be_a_whole_number(tmp_path, rank):
    p = _write(tmp_path, _dumps(H200), "trace.json")
    if rank in ("1", None):    # a digit string is a number; None: the trace's own rank
        assert len(load_traces(p, rank=rank).events)
        return
    with pytest.raises(TraceError, match="rank="):
        load_traces(p, rank=rank)


def test_valid_json_orjson_refuses_still_loads(tmp_path):
    """Integers beyond 64 bits and NaN are valid to Python's json (which writes them): the
    file is read, the values flagged, never called 'not valid JSON ... truncated'."""
    doc = copy.deepcopy(H200)
    x = _x_events(doc)
    x[0]["args"] = {"correlation": 2**70}
    x[1]["dur"] = math.nan
    whole = _load(tmp_path, _dumps(H200), "h200")
    run = _load(tmp_path, _dumps(doc), "h200")
    assert run is not None and len(run.events) == len(whole.events)
    assert any("correlation" in f for f in run.flags) and any("dur" in f for f in run.flags)


def test_decompressed_size_is_capped(tmp_path):
    """A gzip that is mostly padding stops at the cap with a message saying how to raise it;
    under the cap, padding is read (and dropped) at stream speed."""
    p = tmp_path / "rank-0.json.gz"
    with gzip.open(p, "wb", 1) as fh:
        for _ in range(64):
            fh.write(b" " * (1 << 20))
        fh.write(_dumps(H200))
    with pytest.raises(TraceError, match=r"more than 0.031\d* GB .* max_gb=N"):
        load_traces(p, max_gb=1 / 32)
    run = load_traces(p)   # default cap: 4 GB
    assert len(run.events) == len(load_traces(_write(tmp_path, _dumps(H200), "x-rank-0.json")).events)
    with pytest.raises(TraceError, match="max_gb"):
        load_traces(p, max_gb=0)


@pytest.mark.parametrize("where", ["before the document", "in a metadata string",
                                   "between traceEvents and [", "between two events",
                                   "after the document"])
def test_padding_anywhere_json_allows_it_loads_the_same_events(tmp_path, monkeypatch, where):
    monkeypatch.setattr(trace_json, "_CHUNK", 4096)
    body = _dumps(H200)
    pad = b" \n\t" * 100_000
    key = body.index(b'"traceEvents"')
    bracket = body.index(b"[", key)
    boundary = body.index(b"}, {", bracket + 500) + 1
    data = {"before the document": pad + body,
            "in a metadata string": b'{"note": "' + pad.replace(b"\n", b"x").replace(b"\t", b"y")
                                    + b'", ' + body[1:],
            "between traceEvents and [": body[:bracket] + pad + body[bracket:],
            "between two events": body[:boundary] + pad + body[boundary:],
            "after the document": body + pad}[where]
    want = load_traces(_write(tmp_path, body, "plain-rank-0.json")).events
    got = load_traces(_write(tmp_path, data)).events
    assert got["ts_ns"].tolist() == want["ts_ns"].tolist()
    assert got["name"].astype(str).tolist() == want["name"].astype(str).tolist()


# --- the schema path (msgspec) reads what orjson's dicts read ------------------------------

def _read_both(p: Path, monkeypatch):
    """read_trace's outcome with the schema decoder, then with orjson's dicts only."""
    out = []
    for schema in (True, False):
        if not schema:
            monkeypatch.setattr(trace_json.columns, "msgspec", None)
        try:
            meta, cols = trace_json.read_trace(p)
            raw = {k: (v.dtype.str, v.tolist()) for k, v in cols.columns().items()}
            out.append((json.dumps(meta, sort_keys=True, default=repr), raw, cols.problems,
                        cols.kinds.texts(), cols.names.texts()))
        except TraceError as e:
            out.append(str(e))
    monkeypatch.undo()
    return out


# what the schema skips or refuses differently from orjson, as members added at the end of
# one event (a key given twice: the last wins): each must load the same, or fail the same
SCHEMA_EDGES = {
    "invalid UTF-8 in a skipped string": b'"zz": "a\xffb"',
    "int beyond int64 (orjson: float)": b'"args": {"correlation": 18446744073709551616}',
    "int in uint64": b'"args": {"correlation": 18446744073709551615}',
    "int below int64": b'"pid": -9223372036854775809',
    "nesting orjson takes, msgspec not": b'"zz": ' + b"[" * 1010 + b"]" * 1010,
    "nesting neither takes": b'"zz": ' + b"[" * 1100 + b"]" * 1100,
    "lone surrogate skipped": b'"zz": "\\ud800"',
    "duplicate key": b'"ts": 5',
    "ph last": b'"ph": "X"',
    "a phase not in the format": b'"ph": "Z"',
    "args null": b'"args": null',
    "args a list": b'"args": [1]',
    "escaped key": b'"d\\u0075r": 7',
    "1e400": b'"zz": 1e400',
}


@pytest.mark.parametrize("name", list(SCHEMA_EDGES))
def test_schema_path_reads_what_orjson_reads_on_its_edges(tmp_path, monkeypatch, name):
    evs = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 10 * i,
            "dur": 3, "args": {"correlation": i}} for i in range(50)]
    body = json.dumps({"traceEvents": evs}).encode()
    if name == "ph last":
        body = body.replace(b'{"ph": "X", "cat": "kernel", "name": "k20"',
                            b'{"cat": "kernel", "name": "k20"')
    end = b'"correlation": 20}}'
    assert end in body
    body = body.replace(end, end[:-1] + b", " + SCHEMA_EDGES[name] + b"}")
    p = _write(tmp_path, body)
    schema, dicts = _read_both(p, monkeypatch)
    assert schema == dicts


@settings(max_examples=100, deadline=timedelta(seconds=20),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(doc_mutants(), st.sampled_from([97, 4096, 256 << 10]))
def test_schema_path_reads_what_orjson_reads_on_mutants(tmp_path, monkeypatch, mutant, chunk):
    seed, doc = mutant
    p = _write(tmp_path, _dumps(doc))
    monkeypatch.setattr(trace_json, "_CHUNK", chunk)
    schema, dicts = _read_both(p, monkeypatch)
    assert schema == dicts
