"""trace: what a tooltip says about one event beyond its name and time: input shapes and
dtypes (``record_shapes``), the bytes a collective moves, its process group and sequence
number where the profiler recorded them. A side table (rank, ts_ns, name, detail) joined to
the events on (rank, ts_ns, name), so the events table keeps its schema; detail strings
are interned on the wire (most calls repeat a few shapes)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from nbtools.analysis import tables

DETAIL_COLUMNS = {"rank": np.int32, "ts_ns": np.int64, "name": "str", "detail": "str"}
_SHORT = {"float": "f32", "c10::BFloat16": "bf16", "c10::Half": "f16", "double": "f64",
          "long int": "i64", "int": "i32", "bool": "bool", "unsigned char": "u8",
          "signed char": "i8", "short int": "i16"}
_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "f64": 8, "i64": 8, "i32": 4, "bool": 1, "u8": 1,
          "i8": 1, "i16": 2}
# Kineto's collective metadata (record_param_comms, NCCL): what a person asks first
_COMM_KEYS = (("Collective name", "collective"), ("Process Group Name", "group"),
              ("Process Group Description", "group"), ("Group size", "group size"),
              ("Seq", "seq"), ("In msg nelems", "in elements"), ("Out msg nelems", "out elements"),
              ("dtype", "dtype"), ("In split size", "in split"), ("Process Group Ranks", "ranks"))


def describe(shapes, dtypes, meta: str) -> str:
    """One event's detail line ('' when there is nothing to say)."""
    parts, nbytes = [], 0
    ins = []
    for shape, dt in zip(shapes or [], dtypes or []):
        if not dt:
            continue
        short = _SHORT.get(dt, dt)
        if shape:
            ins.append(f"{short}{list(shape)}")
            if short in _BYTES:
                nbytes += int(np.prod(shape)) * _BYTES[short]
        else:
            ins.append(short)
    if ins:
        parts.append("inputs: " + ", ".join(ins))
    if nbytes:
        parts.append(f"{nbytes:,} bytes in")
    if meta:
        m = {}
        for text in (meta, "{" + meta + "}"):     # Kineto gives a fragment ('"k": v, ...')
            try:
                m = json.loads(text)
                break
            except ValueError:
                continue
        m = m if isinstance(m, dict) else {}
        said = set()
        for key, label in _COMM_KEYS:
            if key in m and label not in said and m[key] not in ("", None):
                said.add(label)
                parts.append(f"{label}: {m[key]}")
    return " · ".join(parts)


def detail_rows() -> dict:
    """Empty columns for add_detail; details_wire turns them into the wire form."""
    return {"rank": [], "ts_ns": [], "name": [], "detail": []}


def add_detail(rows: dict, rank: int, e) -> None:
    """One profiler event's detail (shapes need ``record_shapes=True``), if it has one.
    Called from the one pass over a profile's events (load.events_from_profiler)."""
    try:
        shapes, dtypes, meta = e.shapes(), e.dtypes(), e.metadata_json()
    except Exception:  # noqa: BLE001 - older builds lack some accessors
        return
    if not (shapes or meta):
        return
    text = describe(shapes, dtypes, meta)
    if text:
        rows["rank"].append(rank)
        rows["ts_ns"].append(e.start_ns())
        rows["name"].append(e.name())
        rows["detail"].append(text)


def details_wire(rows: dict) -> dict:
    return tables.to_wire(DETAIL_COLUMNS, rows)


def attach(boxes: pd.DataFrame, details: pd.DataFrame | None) -> np.ndarray:
    """Each box's detail ('' for merged boxes and events without one)."""
    out = np.full(len(boxes), "", object)
    if details is None or not len(details) or not len(boxes):
        return out
    key = pd.DataFrame({"rank": boxes["rank"].to_numpy(np.int64),
                        "ts_ns": boxes["ts_ns"].to_numpy(np.int64),
                        "name": boxes["name"].astype(str).to_numpy(object),
                        "i": np.arange(len(boxes))})
    d = pd.DataFrame({"rank": details["rank"].to_numpy(np.int64),
                      "ts_ns": details["ts_ns"].to_numpy(np.int64),
                      "name": details["name"].astype(str).to_numpy(object),
                      "detail": details["detail"].astype(str).to_numpy(object)})
    hit = key.merge(d.drop_duplicates(["rank", "ts_ns", "name"]), on=["rank", "ts_ns", "name"])
    single = boxes["count"].to_numpy() == 1
    idx = hit["i"].to_numpy()
    ok = single[idx]
    out[idx[ok]] = hit["detail"].to_numpy(object)[ok]
    return out
