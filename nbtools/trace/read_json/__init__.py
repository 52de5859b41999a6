"""Streaming reader of the Kineto/Chrome trace JSON any PyTorch job writes -> raw columns
(kineto_events.RAW), batch by batch, so parsed dicts never outlive their batch and memory
stays near the size of the columns. Plain or gzip, object or bare-array format.

Damaged input is either refused with a TraceError that says what is wrong, or loaded with
the damage counted in ``_Columns.problems`` (load_traces turns them into the run's flags):
every scan is linear in the file, and the decompressed size is capped."""
from __future__ import annotations

import gc
import json
import re
import zlib
from operator import itemgetter, methodcaller
from pathlib import Path

import numpy as np

from nbtools.trace.kineto import RAW

try:
    import orjson
    _loads = _loads_view = orjson.loads
except ImportError:  # pragma: no cover - orjson is a dependency; json is the slow fallback
    _loads = json.loads

    def _loads_view(view):
        return json.loads(bytes(view))


class TraceError(ValueError):
    """A trace that cannot be loaded; the message names the file and what to do."""


MAX_GB = 4.0
"""Default cap on a trace's decompressed size: far above what torch.profiler writes for one
rank, low enough that a damaged or hostile .gz (gigabytes of whitespace) stops with a clear
message instead of running for minutes. ``load_traces(..., max_gb=...)`` raises it."""

_DIGITS = re.compile(r"-?\d+")
_KEY = b'"traceEvents"'
_NOT_SPACE = re.compile(rb"[^ \t\r\n]")
# bounded: an unbounded \s* re-read a long whitespace run on every chunk (quadratic); a
# separator wider than this is not cut at, and the rest is parsed at once instead
_SEP, _SEP_MAX = re.compile(rb"[ \t\r\n]{0,64},[ \t\r\n]{0,64}\{"), 130
_X_FIELDS = itemgetter("cat", "name", "pid", "tid", "ts", "dur")
_PH = itemgetter("ph")
_ARGS, _CORR = methodcaller("get", "args", {}), methodcaller("get", "correlation", -1)
_CHUNK = 256 << 10   # small batches: the dicts of one batch die before the next (cache, memory)
_INT64 = np.iinfo(np.int64)
# µs -> ns must fit int64 (year 2262); a ts beyond that is damage, not a time
_MAX_US = float(_INT64.max // 1000)


def _intern(values, table: dict, problems: dict, what: str) -> np.ndarray:
    """Strings -> codes in ``table`` (shared across batches). A C-level dict lookup per
    value; new strings (rare after the first batches) are added first."""
    try:
        return np.fromiter(map(table.__getitem__, values), np.int32, len(values))
    except (KeyError, TypeError):
        pass
    try:
        new = dict.fromkeys(values)
    except TypeError:   # a list or dict where a name belongs: keep the event, say so
        bad = [v for v in values if not _hashable(v)]
        _count(problems, f"{what} is not text", len(bad), bad[0], "shown as <invalid ...>")
        values = [v if _hashable(v) else f"<invalid {what}: {type(v).__name__}>" for v in values]
        new = dict.fromkeys(values)
    for v in new:
        table.setdefault(v, len(table))
    return np.fromiter(map(table.__getitem__, values), np.int32, len(values))


def _hashable(v) -> bool:
    try:
        hash(v)
        return True
    except TypeError:
        return False


def _count(problems: dict, what: str, n: int, example, fate: str) -> None:
    """problems[what] = [events, an example value, what became of them]."""
    if n:
        seen = problems.setdefault(what, [0, _short(example), fate])
        seen[0] += int(n)


def _short(v) -> str:
    # type first: a deeply nested list would make repr recurse
    if isinstance(v, (list, dict)):
        return f"a {type(v).__name__}"
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


class _Columns:
    """Raw columns accumulated batch by batch, so parsed dicts never outlive their batch."""

    def __init__(self):
        self.kinds, self.names = {}, {}
        self.parts = []
        self.problems: dict = {}   # what is damaged -> [events, an example, what was done]

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
            if not isinstance(events, list):
                events = []
            junk = [e for e in events if type(e) is not dict]
            if junk:
                _count(self.problems, "traceEvents entry is not an object", len(junk),
                       junk[0], "skipped")
            xs = [e for e in events if type(e) is dict and e.get("ph") == "X"]
            timeless = [e for e in xs if e.get("ts") is None]
            if timeless:
                _count(self.problems, "ts is missing", len(timeless), timeless[0].get("name"),
                       "dropped")
                xs = [e for e in xs if e.get("ts") is not None]
            rows = [(e.get("cat", ""), e.get("name", ""), e.get("pid", 0), e.get("tid", 0),
                     e["ts"], e.get("dur", 0)) for e in xs]
            corr = [a.get("correlation", -1) if type(a) is dict else -1
                    for a in (e.get("args") for e in xs)]
            if not rows:
                return
        cat, name, pid, tid, ts, dur = zip(*rows)
        p = self.problems
        ts_ns, bad_ts = _to_ns(ts, p, "ts", "dropped")
        dur_ns, _ = _to_ns(dur, p, "dur", "taken as 0")
        part = (_intern(cat, self.kinds, p, "cat"), _intern(name, self.names, p, "name"),
                _ints(pid, p, "pid"), _ints(tid, p, "tid"), ts_ns, dur_ns,
                _ints(corr, p, "correlation"))
        if bad_ts.any():   # an event with no usable time has no place on a timeline
            part = tuple(a[~bad_ts] for a in part)
        self.parts.append(part)

    def columns(self) -> dict:
        """The raw columns (see kineto_events.build), concatenated; the batches are released."""
        parts, self.parts = self.parts, []
        return {key: np.concatenate([p[i] for p in parts] or [np.zeros(0, np.int64)])
                for i, key in enumerate(RAW)}


def _array(values, first_types):
    """np.asarray for the common case (a batch of plain numbers), None otherwise: a list
    among numbers makes asarray raise, a str among them makes it text."""
    if type(values[0]) not in first_types:
        return None
    try:
        return np.asarray(values)
    except (ValueError, TypeError, OverflowError):
        return None


def _ints(values, problems: dict, what: str) -> np.ndarray:
    """Ids -> int64. "Spans", "stream 7", 7.0: keep the digits, -1 when there are none;
    ids beyond int64 (or not numbers at all) are -1 and counted."""
    a = _array(values, (int,))
    if a is not None and a.dtype.kind == "i":
        return a.astype(np.int64)
    out = np.empty(len(values), np.int64)
    bad, example = 0, None
    for i, v in enumerate(values):
        if isinstance(v, str):
            m = _DIGITS.search(v)
            n = int(m.group()) if m and len(m.group()) < 20 else -1
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and v == v \
                and abs(v) < 2**63:
            n = int(v)
        else:
            n = None
        if n is None or not _INT64.min <= n <= _INT64.max:
            bad, example, n = bad + 1, (example if bad else v), -1
        out[i] = n
    _count(problems, f"{what} is not an integer within int64", bad, example, "taken as -1")
    return out


def _to_ns(values, problems: dict, what: str, fate: str) -> tuple[np.ndarray, np.ndarray]:
    """Microseconds (int or float) -> (ns, bad). Integer and fraction are converted
    separately so epoch-µs floats keep what float64 holds (about 0.25 µs in 2024) instead of
    losing more in ts*1000. Bad: not a finite number within int64 ns (0 there, counted)."""
    a = _array(values, (int, float))
    if a is not None and a.dtype.kind == "i":
        bad = (a > _MAX_US) | (a < -_MAX_US)   # not abs: abs(-2**63) is -2**63
        ns = (np.where(bad, 0, a) if bad.any() else a.astype(np.int64)) * 1000
    else:
        if a is None or a.dtype.kind != "f":
            a = np.array([v if isinstance(v, (int, float)) and not isinstance(v, bool)
                          and abs(v) <= _MAX_US else np.nan for v in values], np.float64)
        bad = ~(np.abs(a) <= _MAX_US)    # NaN and inf too
        if bad.any():
            a = np.where(bad, 0.0, a)
        whole = np.floor(a)
        ns = whole.astype(np.int64) * 1000 + np.rint((a - whole) * 1000).astype(np.int64)
    if bad.any():
        ex = [v for v, b in zip(values, bad) if b][0]
        _count(problems, f"{what} is not a finite number of µs within int64 ns", bad.sum(), ex,
               fate)
    return ns, bad


def _chunks(path: Path, max_bytes: int):
    """Decompressed pieces of about _CHUNK bytes (gzip detected by its magic bytes); a
    TraceError past ``max_bytes`` in all."""
    total = 0
    for piece in _pieces(path):
        total += len(piece)
        if total > max_bytes:
            raise TraceError(
                f"{path}: holds more than {max_bytes / 2**30:.3g} GB of JSON once decompressed "
                "(a damaged file, or one that is mostly padding). If this trace really is that "
                "large, pass load_traces(..., max_gb=N) with a larger N.")
        yield piece


def _pieces(path: Path):
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


class _Head:
    """Finds where the events array starts, looking at each byte once: the bytes before
    the first non-space are dropped (JSON ignores them), and each search resumes where the
    last chunk's ended. (Re-scanning the buffer per chunk was quadratic: 32 MB of
    whitespace between "traceEvents": and its '[' took 7.5 s.)"""

    def __init__(self):
        self.started, self.pos, self.want = False, 0, None   # want: b":" then b"["

    def find(self, buf: bytearray):
        """-> (head bytes, offset of the array's '[') once found, else None."""
        if not self.started:
            m = _NOT_SPACE.search(buf)
            if m is None:
                del buf[:]
                return None
            del buf[:m.start()]
            self.started = True
            if buf[:1] == b"[":   # Chrome's JSON Array Format: a bare list
                return b"", 0
        while True:
            if self.want is None:
                k = buf.find(_KEY, self.pos)
                if k < 0:
                    self.pos = max(self.pos, len(buf) - len(_KEY) + 1)
                    return None
                self.pos, self.want = k + len(_KEY), b":"
            m = _NOT_SPACE.search(buf, self.pos)
            if m is None:
                self.pos = len(buf)
                return None
            at = m.start()
            if buf[at:at + 1] != self.want:   # the name was text in a string, not the key
                self.pos, self.want = at, None
            elif self.want == b":":
                self.pos, self.want = at + 1, b"["
            else:
                return bytes(buf[:at]), at


def read_trace(path, max_gb: float = MAX_GB) -> tuple[dict, _Columns]:
    """One Kineto JSON file -> (top-level metadata, raw columns), streaming: the events
    array is cut at event boundaries into small batches, each parsed and reduced to columns
    before the next is read, so memory stays near the size of the columns."""
    path = Path(path)
    cols = _Columns()
    head, buf, streaming, finder, cutter = None, bytearray(), True, _Head(), _Cutter(cols)
    was_enabled = gc.isenabled()
    gc.disable()   # batches are acyclic dicts: collections would rescan them for nothing
    try:
        for chunk in _chunks(path, int(max_gb * 2**30)):
            buf += chunk
            if head is None and (found := finder.find(buf)) is not None:
                head, at = found   # from here on buf starts with the events array's '['
                del buf[:at]
            if head is not None and streaming:
                streaming = cutter.cut(buf)
        doc = _parse(path, (head or b"") + bytes(buf), cut=bool(cols.parts))
    except (OSError, EOFError, zlib.error) as e:
        raise TraceError(f"{path}: cannot be read as a gzip or plain file ({e}). "
                         "If it was copied while the job wrote it, copy it again.") from None
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
        raise TraceError(f"{path}: 'traceEvents' is not a list of events "
                         f"(it is a {type(doc['traceEvents']).__name__}).")
    cols.add(doc.pop("traceEvents"))
    return doc, cols


def _parse(path: Path, text: bytes, cut: bool):
    """The rest of the document. orjson refuses some valid JSON (integers beyond 64 bits,
    lone surrogates) and the NaN/Infinity Python's json writes; the standard library reads
    those, so only what it refuses too is called invalid, with where and why."""
    try:
        return _loads(text)
    except ValueError:
        pass
    try:
        return json.loads(text)
    except RecursionError:
        raise TraceError(f"{path}: nests JSON arrays/objects too deeply to be a trace.") from None
    except ValueError as e:
        if not isinstance(e, json.JSONDecodeError):   # well-formed, but a value is not
            raise TraceError(f"{path}: holds a value that cannot be read ({e}). The file is "
                             "damaged, or not written by a profiler.") from None
        pos, msg = e.pos, e.msg
        if not text.strip() and not cut:
            raise TraceError(f"{path}: is empty (not valid JSON). The profiler may have been "
                             "stopped before writing: export the trace again.") from None
        if pos >= len(text.rstrip()) - 1:
            raise TraceError(f"{path}: is not valid JSON: it ends early ({msg}). The file may "
                             "be truncated (the profiler was stopped while writing): export "
                             "the trace again.") from None
        near = text[max(0, pos - 30):pos + 30].decode("utf-8", "replace")
        raise TraceError(f"{path}: is not valid JSON: {msg} near {near!r}. The file is "
                         "damaged in the middle, not cut short: export the trace again.") from None


class _Cutter:
    """Parses the longest prefix of the buffer ('[' + events) that ends at an event
    boundary, in place: the separator byte after the last '}' becomes ']' for the parse,
    then the one before the next '{' becomes the new '['. A '}' followed by ', {' inside a
    string or a nested object leaves invalid JSON; then the next earlier candidate is tried.
    Candidates that failed stay failed (their bytes do not change), so each call only looks
    at what the last chunk added: a long run without a boundary is read once, not per chunk."""

    def __init__(self, cols: _Columns):
        self.cols, self.tried_to, self.misses = cols, 0, 0

    def cut(self, buf: bytearray) -> bool:
        """False once cutting is given up (then the rest is parsed at once)."""
        if self._cut(buf):
            self.misses, self.tried_to = 0, 0
        else:
            self.misses += 1
            # a '}' this far from the end had all of its separator in view already
            self.tried_to = max(0, len(buf) - _SEP_MAX)
        return self.misses < 64

    def _cut(self, buf: bytearray) -> bool:
        end = len(buf)
        for _ in range(8):
            k = buf.rfind(b"}", self.tried_to, end)
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
                    self.cols.add(events)
                    buf[m.end() - 2] = 91   # '['
                    del buf[:m.end() - 2]
                    return True
            end = k
        return False
