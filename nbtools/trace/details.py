"""trace: what a tooltip says about one event beyond its name and time: input shapes and
dtypes (``record_shapes``), the bytes a collective moves, its process group and sequence
number where the profiler recorded them, and with ``StepConfig(stack=True)`` the innermost
frames of the user's code that were running (the profiler's Python frames, ``with_stack``).
A side table (rank, ts_ns, name, detail) joined to
the events on (rank, ts_ns, name), so the events table keeps its schema; detail strings
are interned on the wire (most calls repeat a few shapes)."""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import re
import sys

import numpy as np
import pandas as pd

from nbtools.schema import tables
from nbtools.common.units import fmt_bytes

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


# Kineto's collective dtype names -> bytes per element
_COMM_BYTES = {"Float": 4, "BFloat16": 2, "Half": 2, "Double": 8, "Long": 8, "Int": 4,
               "Short": 2, "Byte": 1, "Char": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1}


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
        parts.append(f"{fmt_bytes(nbytes)} in")
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
            if key in m and label not in said and m[key] not in ("", None, "[]"):
                said.add(label)
                parts.append(f"{label}: {m[key]}")
        size = _COMM_BYTES.get(str(m.get("dtype")))
        n = m.get("In msg nelems")
        if size and isinstance(n, int) and not isinstance(n, bool) and n > 0:
            parts.append(f"{fmt_bytes(n * size)} moved in")
    return " · ".join(parts)


NOT_RECORDED = "not recorded in the trace"
_SIZE = re.compile(r"\d (?:[KMGT]?B|bytes) (?:moved )?in\b")     # bytes: runs saved before


def collective_detail(text: str) -> str:
    """A collective's detail, saying what its trace left out: gloo's ops (and a trace
    without record_param_comms args) carry no process group, ranks or bytes moved, and an
    empty field would read as zero."""
    parts = [text] if text else []
    if "group: " not in text and "ranks: " not in text:
        parts.append(f"group, ranks: {NOT_RECORDED}")
    if not _SIZE.search(text):
        parts.append(f"bytes: {NOT_RECORDED}")
    return " · ".join(parts)


def trace_file_details(path, rank: int) -> dict:
    """The details of one Kineto JSON trace file (wire form), from its events' args: "Input
    Dims"/"Input type" and the collective keys (NCCL kernels and record_param_comms carry
    them). Times as the trace reader makes them (µs since baseTimeNanoseconds -> epoch ns),
    so they join to that file's events. Reads the whole file: for traces of a few MB."""
    import gzip
    from pathlib import Path
    from nbtools.trace.read_json.columns import to_ns
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        doc = json.load(fh)
    base = doc.get("baseTimeNanoseconds") if isinstance(doc, dict) else None
    base = base if isinstance(base, int) and not isinstance(base, bool) else 0
    rows = detail_rows()
    for e in doc.get("traceEvents", []) if isinstance(doc, dict) else []:
        args = e.get("args") if isinstance(e, dict) and e.get("ph") == "X" else None
        ts = e.get("ts") if args else None
        if not isinstance(args, dict) or not isinstance(ts, (int, float)) \
                or isinstance(ts, bool):
            continue
        meta = {k: args[k] for k, _ in _COMM_KEYS if k in args}
        dims, types = args.get("Input Dims"), args.get("Input type")
        if not (meta or dims):
            continue
        text = describe(dims if isinstance(dims, list) else [],
                        types if isinstance(types, list) else [],
                        json.dumps(meta) if meta else "")
        if text:
            rows["rank"].append(rank)
            rows["ts_ns"].append(ts)
            rows["name"].append(str(e.get("name", "")))
            rows["detail"].append(text)
    # µs -> ns as the reader converts them, so the details join to that file's events
    ns, bad = to_ns(rows["ts_ns"], {}, "ts", "dropped")
    keep = ~bad
    rows = {k: [v for v, ok in zip(col, keep) if ok] for k, col in rows.items()}
    rows["ts_ns"] = (ns[keep] + base).tolist()
    return details_wire(rows)


def detail_rows(stack: bool = False, code=None) -> dict:
    """Empty columns for add_detail; details_wire turns them into the wire form. ``stack``:
    the profile was taken ``with_stack``: keep its Python frames and the ops they hold;
    ``code``: the step that ran (its by-value code is named after its module, below)."""
    rows = {"rank": [], "ts_ns": [], "name": [], "detail": []}
    if stack:
        rows["_frames"], rows["_ops"] = [], []
        rows["_files"] = dynamic_code_files(code) if code is not None else {}
    return rows


def dynamic_code_files(root, limit: int = 5000) -> dict:
    """(first line, name) -> file name for the code reachable from ``root`` (closures,
    globals, classes' methods) that travelled by value: cloudpickle ships it with
    co_filename "<dynamic-code>", but each function keeps its ``__module__``."""
    out, seen, todo = {}, set(), [root]
    while todo and len(seen) < limit:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        if isinstance(f, functools.partial):
            todo.append(f.func)
        elif isinstance(f, type):
            todo.extend(vars(f).values())
        elif dataclasses.is_dataclass(f):
            todo.extend(getattr(f, x.name, None) for x in dataclasses.fields(f))
        code = getattr(f, "__code__", None)
        if code is None:
            if not isinstance(f, type) and callable(f):
                todo.append(type(f))            # an nn.Module: its class's forward
            continue
        todo.extend(c.cell_contents for c in (f.__closure__ or ()) if _full(c))
        if code.co_filename != "<dynamic-code>":
            continue
        mod = getattr(f, "__module__", None) or "__main__"
        label = "__main__" if mod == "__main__" else mod.rsplit(".", 1)[-1] + ".py"
        codes = [code]
        while codes:
            c = codes.pop()
            out[(c.co_firstlineno, c.co_name)] = label
            codes.extend(k for k in c.co_consts if hasattr(k, "co_firstlineno"))
        todo.extend(v for v in (getattr(f, "__globals__", None) or {}).values()
                    if callable(v) or dataclasses.is_dataclass(v))
    return out


def _full(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


def add_detail(rows: dict, rank: int, e) -> None:
    """One profiler event's detail (shapes need ``record_shapes=True``), if it has one.
    Called from the one pass over a profile's events (load.events_from_profiler)."""
    if "_frames" in rows:
        try:
            kind = e.activity_type()
            if kind == "python_function":
                rows["_frames"].append((e.start_thread_id(), e.start_ns(), e.end_ns(), e.name()))
                return
            if kind in ("cpu_op", "user_annotation"):
                rows["_ops"].append((e.start_thread_id(), e.start_ns(), e.end_ns(), e.name(),
                                     rank))
        except Exception:  # noqa: BLE001 - older builds lack activity_type()
            pass
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
    """Event details rows (with Python stacks folded in) as wire columns for the client."""
    frames, ops, files = rows.pop("_frames", None), rows.pop("_ops", None), rows.pop("_files", {})
    if frames:
        _add_stacks(rows, frames, ops, files)
    return tables.to_wire(DETAIL_COLUMNS, rows)


_FRAME = re.compile(r"^(.+)\((\d+)\): (.+)$")     # Kineto's "path(line): function"
# frames of these packages are the machinery around the user's code, not the code itself
_NOT_USER = frozenset({"torch", "ipyparallel", "ipykernel", "IPython", "tornado", "zmq",
                       "cloudpickle", "traitlets", "jupyter_client", "triton", "functorch",
                       "nbtools"}) | frozenset(sys.stdlib_module_names)
# the models a lab ships are the code a person reads (the rest of nbtools runs them)
_NBTOOLS_MODELS = ("nbtools/models.py", "nbtools/engine/scenarios.py")
_OURS = re.compile(r"(?:^|/)nbtools/.*$")
STACK_FRAMES = 4     # innermost user frames a tooltip names


def user_frame(name: str, files: dict | None = None) -> str | None:
    """'file.py:line function' for a frame of the user's code, else None (torch, the lab's
    engine, the standard library, site-packages, built-ins). ``files``: dynamic_code_files."""
    m = _FRAME.match(name)
    if not m:
        return None
    path, line, fn = m.groups()
    if path == "<dynamic-code>":
        path = (files or {}).get((int(line), fn), "<step code>")
    elif path.startswith("<"):      # <string>, <frozen runpy>: how the engine was started
        return None
    path = path.replace("\\", "/")
    if any(s in path for s in ("site-packages/", "dist-packages/", "/lib/python3")):
        return None
    ours = _OURS.search(path)
    if ours:                    # this package (an editable install shows its full path)
        if not ours.group(0).lstrip("/").startswith(_NBTOOLS_MODELS):
            return None
    elif not path.startswith("/") and _installed(path.split("/")[0].removesuffix(".py")):
        return None             # a path the tracer shortened against sys.path
    return f"{path.rsplit('/', 1)[-1]}:{line} {fn}"


@functools.lru_cache(maxsize=None)
def _installed(top: str) -> bool:
    """A top-level module of the standard library or an installed package (pytest, torch),
    not the user's own (a shortened path does not say which: ask where it imports from)."""
    if top in _NOT_USER:
        return True
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    origin = (spec.origin or "") if spec else ""
    return any(s in origin.replace("\\", "/") for s in ("site-packages/", "dist-packages/",
                                                          "/lib/python3"))


def _add_stacks(rows: dict, frames: list, ops: list, files: dict) -> None:
    """Each op's innermost user frames (Python frames nest on their thread, so one sweep
    per thread with a stack of open frames finds every op's enclosing ones)."""
    said = {(r, t, n): i for i, (r, t, n) in enumerate(zip(rows["rank"], rows["ts_ns"],
                                                          rows["name"]))}
    items = sorted([(tid, s, -e, 0, name, None) for tid, s, e, name in frames]
                   + [(tid, s, -e, 1, name, rank) for tid, s, e, name, rank in ops])
    open_, tid_now, text_of = [], None, {}
    for tid, s, neg_end, is_op, name, rank in items:
        if tid != tid_now:
            open_, tid_now = [], tid
        while open_ and open_[-1][0] <= s:
            open_.pop()
        if not is_op:
            open_.append((-neg_end, user_frame(name, files)))
            continue
        user = [f for _, f in reversed(open_) if f][:STACK_FRAMES]
        if not user:
            continue
        key = tuple(user)
        text = text_of.get(key) or text_of.setdefault(key, "stack: " + " ← ".join(user))
        at = said.get((rank, s, name))
        if at is not None:
            rows["detail"][at] += " · " + text
        else:
            for col, v in zip(("rank", "ts_ns", "name", "detail"), (rank, s, name, text)):
                rows[col].append(v)


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
