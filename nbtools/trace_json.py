"""Streaming reader of the Kineto/Chrome trace JSON any PyTorch job writes -> raw columns
(kineto_events.RAW), batch by batch, so parsed dicts never outlive their batch and memory
stays near the size of the columns. Plain or gzip, object or bare-array format."""
from __future__ import annotations

import gc
import json
import re
import zlib
from operator import itemgetter, methodcaller
from pathlib import Path

import numpy as np

from .kineto_events import RAW

try:
    import orjson
    _loads = _loads_view = orjson.loads
except ImportError:  # pragma: no cover - orjson is a dependency; json is the slow fallback
    _loads = json.loads

    def _loads_view(view):
        return json.loads(bytes(view))


class TraceError(ValueError):
    """A trace that cannot be loaded; the message names the file and what to do."""


_DIGITS = re.compile(r"-?\d+")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_SEP = re.compile(rb"\s*,\s*\{")
_X_FIELDS = itemgetter("cat", "name", "pid", "tid", "ts", "dur")
_PH = itemgetter("ph")
_ARGS = methodcaller("get", "args", {})
_CORR = methodcaller("get", "correlation", -1)
_CHUNK = 256 << 10   # small batches: the dicts of one batch die before the next (cache, memory)


def _intern(values, table: dict) -> np.ndarray:
    """Strings -> codes in ``table`` (shared across batches). A C-level dict lookup per
    value; new strings (rare after the first batches) are added first."""
    try:
        return np.fromiter(map(table.__getitem__, values), np.int32, len(values))
    except KeyError:
        for v in dict.fromkeys(values):
            table.setdefault(v, len(table))
        return np.fromiter(map(table.__getitem__, values), np.int32, len(values))


class _Columns:
    """Raw columns accumulated batch by batch, so parsed dicts never outlive their batch."""

    def __init__(self):
        self.kinds, self.names = {}, {}
        self.parts = []

    def add(self, events) -> None:
        # C-level maps (itemgetter/methodcaller) instead of per-event python: this loop
        # is most of the load time. Anything unusual falls back to the forgiving path.
        try:
            xs = [e for e, ph in zip(events, map(_PH, events)) if ph == "X"]
            if not xs:
                return
            rows = list(map(_X_FIELDS, xs))
            corr = list(map(_CORR, map(_ARGS, xs)))
        except (KeyError, TypeError, AttributeError):
            xs = [e for e in events if type(e) is dict and e.get("ph") == "X"
                  and e.get("ts") is not None]
            rows = [(e.get("cat", ""), e.get("name", ""), e.get("pid", 0), e.get("tid", 0),
                     e["ts"], e.get("dur", 0)) for e in xs]
            corr = [a.get("correlation", -1) if type(a) is dict else -1
                    for a in (e.get("args") for e in xs)]
            if not rows:
                return
        cat, name, pid, tid, ts, dur = zip(*rows)
        self.parts.append((_intern(cat, self.kinds), _intern(name, self.names), _ints(pid),
                           _ints(tid), _to_ns(ts), _to_ns(dur), _ints(corr)))

    def columns(self) -> dict:
        """The raw columns (see kineto_events.build), concatenated; the batches are released."""
        parts, self.parts = self.parts, []
        return {key: np.concatenate([p[i] for p in parts] or [np.zeros(0, np.int64)])
                for i, key in enumerate(RAW)}


def _ints(values) -> np.ndarray:
    a = np.asarray(values)
    if a.dtype.kind in "iu":
        return a.astype(np.int64)
    # "Spans", "stream 7", 7.0: keep the digits, -1 when there are none
    return np.array([int(v) if isinstance(v, (int, float)) else
                     int(m.group()) if (m := _DIGITS.search(str(v))) else -1
                     for v in values], np.int64)


def _to_ns(values) -> np.ndarray:
    """Microseconds (int or float) -> ns. Integer and fraction are converted separately so
    epoch-µs floats keep what float64 holds (about 0.25 µs in 2024) instead of losing more
    in ts*1000."""
    a = np.asarray(values)
    if a.dtype.kind in "iu":
        return a.astype(np.int64) * 1000
    a = np.asarray([float(v) if v is not None else 0.0 for v in values]) if a.dtype == object \
        else a.astype(np.float64)
    whole = np.floor(a)
    return whole.astype(np.int64) * 1000 + np.rint((a - whole) * 1000).astype(np.int64)


def _chunks(path: Path):
    """Decompressed pieces of about _CHUNK bytes (gzip detected by its magic bytes)."""
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        if not gz:
            while piece := fh.read(_CHUNK):
                yield piece
            return
        d, data = zlib.decompressobj(31), b""
        while True:
            if not data and not (data := fh.read(1 << 16)):
                break
            piece = d.decompress(data, _CHUNK)
            if piece:
                yield piece
            if d.eof:   # concatenated gzip members are one file
                data = d.unused_data or fh.read(1 << 16)
                if not data.strip(b"\0"):
                    return
                d = zlib.decompressobj(31)
            else:
                data = d.unconsumed_tail
        if not d.eof:
            raise EOFError("the compressed data ends early (truncated .gz)")


def read_trace(path) -> tuple[dict, _Columns]:
    """One Kineto JSON file -> (top-level metadata, raw columns), streaming: the events
    array is cut at event boundaries into small batches, each parsed and reduced to columns
    before the next is read, so memory stays near the size of the columns."""
    path = Path(path)
    cols = _Columns()
    head, buf, streaming, misses = None, bytearray(), True, 0
    was_enabled = gc.isenabled()
    gc.disable()   # batches are acyclic dicts: collections would rescan them for nothing
    try:
        for chunk in _chunks(path):
            buf += chunk
            if head is None:   # from here on buf starts with the events array's '['
                if buf.lstrip()[:1] == b"[":   # Chrome's JSON Array Format: a bare list
                    head, buf = b"", buf[buf.index(b"["):]
                elif m := _EVENTS_KEY.search(buf):
                    head, buf = bytes(buf[:m.end() - 1]), buf[m.end() - 1:]
            if head is not None and streaming:
                if _cut(buf, cols):
                    misses = 0
                else:
                    misses += 1
                    streaming = misses < 64   # give up cutting; parse the rest at once
        doc = _loads((head or b"") + bytes(buf))
    except (OSError, EOFError, zlib.error) as e:
        raise TraceError(f"{path}: cannot be read as a gzip or plain file ({e}). "
                         "If it was copied while the job wrote it, copy it again.") from None
    except ValueError as e:
        raise TraceError(f"{path}: is not valid JSON ({e}). The file may be truncated (the "
                         "profiler was stopped while writing): export the trace again.") from None
    finally:
        if was_enabled:
            gc.enable()
    if isinstance(doc, list):
        cols.add(doc)
        return {}, cols
    if not isinstance(doc, dict) or "traceEvents" not in doc:
        raise TraceError(f"{path}: has no 'traceEvents': it is not a Kineto/Chrome trace. "
                         "Pass the file torch.profiler wrote (export_chrome_trace or "
                         "tensorboard_trace_handler).")
    if not isinstance(doc["traceEvents"], list):
        raise TraceError(f"{path}: 'traceEvents' is not a list of events.")
    cols.add(doc.pop("traceEvents"))
    return doc, cols


def _cut(buf: bytearray, cols: _Columns) -> bool:
    """Parse the longest prefix of ``buf`` ('[' + events) that ends at an event boundary,
    in place: the separator byte after the last '}' becomes ']' for the parse, then the one
    before the next '{' becomes the new '['. A '}' followed by ', {' inside a string or a
    nested object leaves invalid JSON; then the next earlier candidate is tried."""
    end = len(buf)
    for _ in range(8):
        k = buf.rfind(b"}", 0, end)
        if k < 0:
            return False
        m = _SEP.match(buf, k + 1)
        if m is not None:
            saved, buf[k + 1] = buf[k + 1], 93   # ']'
            try:
                with memoryview(buf) as view, view[:k + 2] as prefix:
                    events = _loads_view(prefix)
            except ValueError:
                events = None
            buf[k + 1] = saved
            if events is not None:
                cols.add(events)
                buf[m.end() - 2] = 91   # '['
                del buf[:m.end() - 2]
                return True
        end = k
    return False
