"""The three tables a Run holds (events, steps, compile_events): their columns, and the
plain form in which they cross from an engine to the client.

The wire form is a dict of numpy arrays; string columns travel as (int32 codes, list of
unique strings) so a name repeated 10^5 times crosses once. On the client every string
column becomes a pandas Categorical.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

# Step ranges in a trace; at most 9 digits: step numbers are int32 in the table, a longer
# one is not a step range
STEP_PATTERNS = (re.compile(r"^nbtools/step (\d{1,9})$"),          # ours: numbering of `steps`
                 re.compile(r"^ProfilerStep\s*#\s*(\d{1,9})$"))   # torch.profiler's schedule

# column -> numpy dtype, or "str" for interned strings (categorical on the client)
EVENT_COLUMNS = {
    "rank": np.int32,
    "lane": "str",        # cpu:<tid> | cuda:<device>:<stream>
    "category": "str",    # compute, communication, memcpy, memset, sync, cpu_op, runtime, annotation
    "name": "str",
    "ts_ns": np.int64,    # absolute epoch ns
    "dur_ns": np.int64,
    "step": np.int32,     # -1 outside steps
    "correlation": np.int64,
    "graph": np.bool_,    # launched by a CUDA graph replay
}
CATEGORIES = ("compute", "communication", "memcpy", "memset", "sync", "cpu_op", "runtime",
              "annotation")

STEP_COLUMNS = {
    "rank": np.int32,
    "step": np.int32,
    "phase": "str",       # warmup | measured | profiled
    "ts_ns": np.int64,    # host clock (epoch ns) at the step's start
    "dur_ns": np.int64,   # CUDA-event time on GPU, perf_counter on CPU
}

COMPILE_COLUMNS = {
    "rank": np.int32,
    "kind": "str",        # compile, recompile, graph_break, cudagraph_skip, cudagraph_record, limit_hit, ...
    "name": "str",        # function name
    "frame": "str",       # file:line
    "reason": "str",
    "compile_id": "str",
    "ts_ns": np.int64,
    "dur_ns": np.int64,
    "step": np.int32,     # the step it happened in (-1: outside steps)
    "graphs": np.int32,   # graphs produced (compile) / counts for other kinds
    "ops": np.int32,
    "guards": np.int32,
    "cache": "str",       # hit | miss | "" (unknown)
}


def empty(columns: dict) -> pd.DataFrame:
    """A table with these columns and no rows, each column of its declared dtype, so an
    empty run's tables concatenate and save like full ones."""
    return from_columns({k: ([] if v == "str" else np.zeros(0, v)) for k, v in columns.items()},
                        columns)


def to_wire(columns: dict, data: dict) -> dict:
    """Columns of python lists or arrays -> plain numpy wire form (engine side)."""
    out = {}
    n = None
    for col, dtype in columns.items():
        values = data[col]
        if dtype == "str":
            codes, uniques = pd.factorize(pd.Series(values, dtype=object).fillna(""), sort=False)
            out[col] = (codes.astype(np.int32), [str(u) for u in uniques])
            length = len(codes)
        else:
            arr = np.asarray(values, dtype=dtype)
            out[col] = arr
            length = len(arr)
        if n is None:
            n = length
        elif n != length:
            raise ValueError(f"column {col} has {length} rows, expected {n}")
    return out


def from_wire(columns: dict, wire: dict) -> pd.DataFrame:
    """Wire form -> DataFrame with categorical string columns (client side)."""
    data = {}
    for col, dtype in columns.items():
        v = wire[col]
        if dtype == "str":
            codes, uniques = v
            data[col] = pd.Categorical.from_codes(np.asarray(codes, np.int32),
                                                  categories=pd.Index(uniques, dtype=object))
        else:
            data[col] = np.asarray(v, dtype=dtype)
    return pd.DataFrame(data)


def from_columns(data: dict, columns: dict) -> pd.DataFrame:
    """Columns of lists/arrays -> DataFrame (client-side constructor for tests and loaders)."""
    return from_wire(columns, to_wire(columns, data))


def concat(frames: list, columns: dict) -> pd.DataFrame:
    """Stack per-rank tables; string columns keep one categorical over the union."""
    frames = [f for f in frames if f is not None and len(f)]
    if not frames:
        return empty(columns)
    out = {}
    for col, dtype in columns.items():
        if dtype == "str":
            out[col] = pd.api.types.union_categoricals(
                [pd.Categorical(f[col]) for f in frames], ignore_order=True)
        else:
            out[col] = np.concatenate([f[col].to_numpy(dtype) for f in frames])
    return pd.DataFrame(out)


def string_codes(column: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """(int64 codes, categories as str) of a string column: the tables' are categorical, a
    frame made by hand may hold plain strings (coded in order of appearance). -1 = NA.
    Code-level work (masks per distinct name, lane lookups) reads strings through this."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes, cats = column.cat.codes, column.cat.categories
    else:
        codes, cats = pd.factorize(column, sort=False)
    return np.asarray(codes, np.int64), pd.Index(cats, dtype=object).astype(str)


def lane_label(rank: int, lane: str) -> str:
    """A lane's name for people, the same on every surface (the timeline's row, Perfetto's
    thread): the rank, then the thread or stream ("r0 CPU thread 30692", "r1 GPU 0 stream 7")."""
    kind, _, rest = str(lane).partition(":")
    if kind == "cuda":
        dev, _, stream = rest.partition(":")
        return f"r{rank} GPU {dev} stream {stream}" if stream else f"r{rank} GPU {dev}"
    return f"r{rank} CPU thread {rest}" if rest else f"r{rank} CPU (all threads)"
