"""trace: one parsed batch of Kineto events -> raw columns (kineto.RAW), with every damaged
value counted (what, how many events, an example, what was done) instead of guessed."""
from __future__ import annotations

import codecs
import re
from itertools import compress, repeat
from operator import attrgetter, eq, is_, itemgetter
from typing import Annotated, Union

import numpy as np

from nbtools.trace.kineto import RAW
from nbtools.trace.read_json.scan import json_loads_view

try:
    import msgspec
except ImportError:  # pragma: no cover - msgspec is a dependency; orjson's dicts then
    msgspec = None

_DIGITS = re.compile(r"-?\d+")
_X_GETS = [itemgetter(k) for k in ("cat", "name", "pid", "tid", "ts", "dur")]
_PH = itemgetter("ph")
_get, _EMPTY = dict.get, {}   # _EMPTY is only ever a default: never written
_INT64 = np.iinfo(np.int64)
# µs -> ns must fit int64 (year 2262); a ts beyond that is damage, not a time
_MAX_US = float(_INT64.max // 1000)


if msgspec is not None:
    # A batch decoded against a schema: only the span ('X') events' seven fields become
    # Python objects; args (most of an NCCL trace's bytes), flows, instants and metadata
    # are skipped in C (read_trace of df_index_resolver: 0.18 s CPU, 0.28 s with orjson
    # building every event's dict). Anything the schema does not expect (a field missing,
    # a phase not in the format, args that is not an object) is a ValidationError: that
    # batch takes orjson's dicts, whose path counts the damage. tests/trace/test_trace_fuzz.py
    # checks both paths read the same.

    # any JSON value, but integers only within int64: orjson makes the larger ones floats
    # (msgspec keeps them exact), so those batches take orjson's path and say the same
    _Value = Union[Annotated[int, msgspec.Meta(ge=-2**63, le=2**63 - 1)], float, str, bool,
                   None, list, dict]

    class _Args(msgspec.Struct, frozen=True, gc=False):
        correlation: _Value = -1

    _NO_ARGS = _Args()

    class _Span(msgspec.Struct, tag_field="ph", tag="X", gc=False):
        cat: _Value
        name: _Value
        pid: _Value
        tid: _Value
        ts: _Value
        dur: _Value
        args: _Args = _NO_ARGS

    # the Trace Event Format's other phases (and Kineto's): decoded to empty objects
    _OTHER = tuple(msgspec.defstruct(f"_Phase{i}", [], tag_field="ph", tag=ph, gc=False)
                   for i, ph in enumerate("BEiICbneSTpFstfPNODMVvRc()"))
    _decode_spans = msgspec.json.Decoder(list[Union[(_Span, *_OTHER)]]).decode
    _SPAN_GETS = [attrgetter(k) for k in ("cat", "name", "pid", "tid", "ts", "dur")] + \
        [attrgetter("args.correlation")]


def parse(view):
    """Bytes of a JSON array of events -> the seven raw lists of its span events (a tuple),
    or, where the schema path cannot say the same as orjson, the list of event dicts.
    ValueError: not valid JSON."""
    if msgspec is not None:
        try:
            # msgspec does not check UTF-8 inside what it skips; orjson refuses the batch
            codecs.utf_8_decode(view, "strict", True)
            events = _decode_spans(view)
        except (ValueError, RecursionError):   # msgspec's errors are ValueErrors
            pass
        else:
            xs = list(compress(events, map(is_, map(type, events), repeat(_Span))))
            # the batch's size last: a trace with no spans can then say what it held
            return (*(list(map(g, xs)) for g in _SPAN_GETS), len(events))
    return json_loads_view(view)


def hashable(v) -> bool:
    """Whether ``v`` can be a dict key (a trace's args may hold lists)."""
    try:
        hash(v)
        return True
    except TypeError:
        return False


def _count(problems: dict, what: str, n: int, example, fate: str) -> None:
    """problems[what] = [events, an example value, what became of them]."""
    if n:
        seen = problems.setdefault(what, [0, short_repr(example), fate])
        seen[0] += int(n)


def short_repr(v) -> str:
    """A bounded repr of a value out of a trace, for messages."""
    # type first: a deeply nested list would make repr recurse
    if isinstance(v, (list, dict)):
        return f"a {type(v).__name__}"
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


class _Table:
    """Distinct strings -> codes, shared across batches. Values that are not text (None, a
    number: 'name': null, 'cat': 5) keep a code of their own and are counted per event, so a
    null name is flagged, not shown as a plausible "None"."""

    def __init__(self, what: str):
        self.what, self.codes, self.odd = what, {}, []

    def encode(self, values, problems: dict) -> np.ndarray:
        """A C-level dict lookup per value; new strings (rare after the first batches) are
        added first."""
        codes = self.codes
        try:
            out = np.fromiter(map(codes.__getitem__, values), np.int32, len(values))
        except (KeyError, TypeError):
            out = self._add(values, problems)
        if self.odd:
            odd = np.isin(out, self.odd)
            if odd.any():
                ex = values[int(np.argmax(odd))]
                _count(problems, f"{self.what} is not text", int(odd.sum()), ex,
                       f"shown as {_text(ex)!r}")
        return out

    def _add(self, values, problems: dict) -> np.ndarray:
        codes = self.codes
        try:
            new = dict.fromkeys(values)
        except TypeError:   # a list or dict where a name belongs: keep the event, say so
            bad = [v for v in values if not hashable(v)]
            _count(problems, f"{self.what} is not text", len(bad), bad[0],
                   "shown as <invalid ...>")
            values = [v if hashable(v) else f"<invalid {self.what}: {type(v).__name__}>"
                      for v in values]
            new = dict.fromkeys(values)
        for v in new:
            if v not in codes:
                codes[v] = len(codes)
                if type(v) is not str:
                    self.odd.append(codes[v])
        return np.fromiter(map(codes.__getitem__, values), np.int32, len(values))

    def texts(self) -> list:
        return [_text(k) for k in self.codes]


def _text(v) -> str:
    return "<no name>" if v is None else str(v)


class Columns:
    """Raw columns accumulated batch by batch, so parsed dicts never outlive their batch."""

    def __init__(self):
        self.kinds, self.names = _Table("cat"), _Table("name")
        self.parts = []
        self.entries = 0   # traceEvents entries seen, spans or not (a file of none is said)
        self.problems: dict = {}   # what is damaged -> [events, an example, what was done]

    def add(self, events) -> None:
        """A batch from parse(): its span events' seven lists (a tuple), or event dicts."""
        if type(events) is tuple:
            cat, name, pid, tid, ts, dur, corr, n = events
            self.entries += n
            if not ts:
                return
        else:
            self.entries += len(events) if isinstance(events, list) else 0
            parts = self._from_dicts(events)
            if parts is None:
                return
            cat, name, pid, tid, ts, dur, corr = parts
        p = self.problems
        ts_ns, bad_ts = to_ns(ts, p, "ts", "dropped")
        dur_ns, _ = to_ns(dur, p, "dur", "taken as 0")
        neg = dur_ns < 0
        if neg.any():   # an end before the start: no width on a timeline, and said so
            _count(p, "dur is negative", int(neg.sum()), dur[int(np.argmax(neg))], "taken as 0")
            dur_ns[neg] = 0
        part = (self.kinds.encode(cat, p), self.names.encode(name, p),
                _ints(pid, p, "pid"), _ints(tid, p, "tid"), ts_ns, dur_ns,
                _ints(corr, p, "correlation"))
        if bad_ts.any():   # an event with no usable time has no place on a timeline
            part = tuple(a[~bad_ts] for a in part)
        self.parts.append(part)

    def _from_dicts(self, events):
        # C-level maps (itemgetter/compress) instead of per-event python. Anything unusual
        # falls back to the forgiving path.
        try:
            phs = list(map(_PH, events))
            odd = set(phs) - _PHASES
            xs = list(compress(events, map(eq, repeat("X"), phs)))
            if xs:
                # one C-level pass per field (faster than row tuples transposed by zip), and
                # dict.get unbound (faster than a methodcaller's bound method per event)
                cat, name, pid, tid, ts, dur = [list(map(g, xs)) for g in _X_GETS]
                corr = list(map(_get, map(_get, xs, repeat("args"), repeat(_EMPTY)),
                                repeat("correlation"), repeat(-1)))
            if odd:   # a phase the format does not have: not placed, and counted (here,
                # after the getters: a batch they refuse is counted by _forgiving instead)
                _count(self.problems, "ph is not a Trace Event Format phase",
                       sum(map(phs.count, odd)), next(iter(odd)), "skipped")
            if not xs:
                return None
        except (KeyError, TypeError, AttributeError):
            xs, rows, corr = self._forgiving(events)
            if not rows:
                return None
            cat, name, pid, tid, ts, dur = zip(*rows)
        return cat, name, pid, tid, ts, dur, corr

    def _forgiving(self, events):
        """The slow path, for a batch with damage: each kind of damage counted."""
        p = self.problems
        if not isinstance(events, list):
            events = []
        junk = [e for e in events if type(e) is not dict]
        if junk:
            _count(p, "traceEvents entry is not an object", len(junk), junk[0], "skipped")
        objs = [e for e in events if type(e) is dict]
        phless = [e for e in objs if "ph" not in e]
        if phless:   # without its phase an event cannot be placed ('X' is a span)
            _count(p, "ph (the event's phase) is missing", len(phless),
                   phless[0].get("name"), "skipped")
        odd = [e["ph"] for e in objs if "ph" in e and not (hashable(e["ph"])
                                                           and e["ph"] in _PHASES)]
        if odd:
            _count(p, "ph is not a Trace Event Format phase", len(odd), odd[0], "skipped")
        xs = [e for e in objs if e.get("ph") == "X"]
        for key, fate in (("ts", "dropped"), ("dur", "taken as 0"), ("name", "shown as <no name>"),
                          ("cat", "classified as other"), ("pid", "taken as 0"),
                          ("tid", "taken as 0")):
            lacking = [e for e in xs if key not in e]
            _count(p, f"{key} is missing", len(lacking), lacking[0].get("name") if lacking
                   else None, fate)
        xs = [e for e in xs if e.get("ts") is not None]
        rows = [(e.get("cat", ""), e.get("name"), e.get("pid", 0), e.get("tid", 0),
                 e["ts"], e.get("dur", 0)) for e in xs]
        corr = [a.get("correlation", -1) if type(a) is dict else -1
                for a in (e.get("args") for e in xs)]
        return xs, rows, corr

    def columns(self) -> dict:
        """The raw columns (see kineto_events.build), concatenated; the batches are released."""
        parts, self.parts = self.parts, []
        return {key: np.concatenate([p[i] for p in parts] or [np.zeros(0, np.int64)])
                for i, key in enumerate(RAW)}


def _array(values, types, times: bool = False):
    """np.asarray for the common case (a batch of plain numbers of ``types``), None
    otherwise: a list among numbers makes asarray raise, a str makes it text. A bool among
    ints would silently be 0 or 1, so where a value is that small the element types are
    looked at too for times (in C; a batch of real times is rarely all above 1, so this
    cheap check catches every bool). Ids are not checked: true as id 1 misplaces no time.
    No values: an empty int64 array (a file's second pass may find nothing to keep)."""
    if not len(values):
        return np.zeros(0, np.int64)
    if type(values[0]) not in types:
        return None
    try:
        a = np.asarray(values)
    except (ValueError, TypeError, OverflowError):
        return None
    if times and a.dtype.kind in "iuf" and a.size and a.min() <= 1 \
            and bool in set(map(type, values)):
        return None
    return a


_INT, _NUM = {int}, {int, float}
# the text ids Kineto itself writes on its one "PyTorch Profiler" span (every trace has it):
# -1, unflagged; other text without digits is damage
_KINETO_IDS = frozenset(("Spans", "PyTorch Profiler"))
# the Trace Event Format's phases (and Kineto's); any other is damage, counted
_PHASES = frozenset("XBEiICbneSTpFstfPNODMVvRc()")


def _ints(values, problems: dict, what: str) -> np.ndarray:
    """Ids -> int64. "Spans", "stream 7", 7.0: keep the digits, -1 when there are none;
    ids beyond int64 (or not numbers at all) are -1 and counted."""
    a = _array(values, _INT)
    if a is not None and a.dtype.kind == "i":
        return a.astype(np.int64)
    out = np.empty(len(values), np.int64)
    bad, example, read, read_ex = 0, None, 0, None
    for i, v in enumerate(values):
        if isinstance(v, str):
            m = _DIGITS.search(v)
            n = int(m.group()) if m and len(m.group()) < 20 else -1 if v in _KINETO_IDS \
                else None
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and v == v \
                and abs(v) < 2**63:
            n = int(v)
        else:
            n = None
        if n is None or not _INT64.min <= n <= _INT64.max:
            bad, example, n = bad + 1, (example if bad else v), -1
        elif type(v) is not int and what != "correlation" and v not in _KINETO_IDS:
            # "stream 7" or 7.5: read by its digits, which may merge lanes; said
            read, read_ex = read + 1, (read_ex if read else v)
        out[i] = n
    _count(problems, f"{what} is not an integer within int64", bad, example, "taken as -1")
    _count(problems, f"{what} is text or a fraction, not an integer", read, read_ex,
           "read by its whole number (lanes may merge)")
    return out


def to_ns(values, problems: dict, what: str, fate: str) -> tuple[np.ndarray, np.ndarray]:
    """Microseconds (int or float) -> (ns, bad). Integer and fraction are converted
    separately so epoch-µs floats keep what float64 holds (about 0.25 µs in 2024) instead of
    losing more in ts*1000. Bad: not a finite number within int64 ns, or not a number at all
    (true/false are not times): 0 there, counted."""
    a = _array(values, _NUM, times=True)
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
