"""trace: finding the top-level events array in a stream of JSON bytes, and cutting it at
event boundaries into batches; each byte is looked at a bounded number of times."""
from __future__ import annotations

import json
import re

try:
    import orjson
    json_loads = json_loads_view = orjson.loads
except ImportError:  # pragma: no cover - orjson is a dependency; json is the slow fallback
    json_loads = json.loads

    def json_loads_view(view):
        """json.loads of a memoryview (orjson takes one as it is; json needs bytes)."""
        return json.loads(bytes(view))


class TraceError(ValueError):
    """A trace that cannot be loaded; the message names the file and what to do."""


class RankUnknown(TraceError):
    """A trace that says no rank (no distributedInfo, no rank in its name): a single
    process's profile, read as one rank once the caller names it."""


_KEY = b"traceEvents"
_NOT_SPACE = re.compile(rb"[^ \t\r\n]")
_STRUCT = re.compile(rb'[{}\[\]"]')
# a string's body up to its closing quote, escapes included (the unrolled form: one C-level
# pass, no backtracking); it stops early at a backslash that is the buffer's last byte
_STR_BODY = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*')
# JSON allows any whitespace before the document; a profiler writes none. Past this much
# (the padding tests use 32 MB) it is not a trace: 2 GB of gzipped blanks took 20 s to be
# called "empty"; now they stop here, after about a second of gunzip.
MAX_BLANK = 256 << 20
# Blanks between events are dropped as they stream (Cutter); a run that cannot be (inside an
# event, or in the metadata) is held in memory, so past this much of it the file is refused:
# no profiler pads a value with megabytes of blanks
MAX_HELD_BLANK = 64 << 20
# bounded: an unbounded \s* re-read a long whitespace run on every chunk (quadratic); a
# separator wider than this is not cut at, and the rest is parsed at once instead
_SEP, _SEP_MAX = re.compile(rb"[ \t\r\n]{0,64},[ \t\r\n]{0,64}\{"), 130


class Head:
    """Finds where the top-level "traceEvents" array starts. Strings and nesting are
    followed (a "traceEvents" key inside the metadata is not the events: 19,888 fake events
    loaded as real before), each byte once: every search resumes where the last chunk's
    stopped, a long string is skipped in C, and the bytes before the first non-space are
    dropped as they stream (JSON ignores them), up to MAX_BLANK."""

    def __init__(self):
        self.started, self.pos, self.depth, self.blank = False, 0, 0, 0
        self.in_str, self.str_at, self.want = False, 0, None   # want: b":" then b"["

    def find(self, buf: bytearray):
        """-> (head bytes, offset of the array's '[') once found, else None."""
        if not self.started:
            m = _NOT_SPACE.search(buf)
            if m is None:
                self.blank += len(buf)
                del buf[:]
                if self.blank > MAX_BLANK:
                    raise TraceError(f"starts with more than {MAX_BLANK >> 20} MB of blanks "
                                     "and no JSON: it is not a trace (a damaged or padded "
                                     "file). Export the trace again.")
                return None
            del buf[:m.start()]
            self.started = True
            if buf[:1] == b"[":   # Chrome's JSON Array Format: a bare list
                return b"", 0
        pos, n = self.pos, len(buf)
        while True:
            if self.in_str:
                end = _STR_BODY.match(buf, pos).end()
                if end >= n or buf[end] != 34:   # not closed yet, or cut after a backslash
                    self.pos = end
                    return None
                self.in_str, pos = False, end + 1
                if self.depth == 1 and end - self.str_at == len(_KEY) \
                        and buf[self.str_at:end] == _KEY:
                    self.want = b":"
                continue
            if self.want is not None:
                m = _NOT_SPACE.search(buf, pos)
                if m is None:
                    self.pos = n
                    return None
                at = m.start()
                if buf[at:at + 1] == self.want:
                    if self.want == b"[":
                        self.pos = at
                        return bytes(buf[:at]), at
                    self.want, pos = b"[", at + 1
                    continue
                self.want = None   # the name was a value, not the key: go on scanning
            m = _STRUCT.search(buf, pos)
            if m is None:
                self.pos = n
                return None
            c, pos = buf[m.start()], m.end()
            if c == 34:   # '"'
                self.in_str, self.str_at = True, pos
            elif c in (123, 91):   # '{' '['
                self.depth += 1
            else:
                self.depth -= 1


class Cutter:
    """Parses the longest prefix of the buffer ('[' + events) that ends at an event
    boundary, in place: the separator byte after the last '}' becomes ']' for the parse,
    then the one before the next '{' becomes the new '['. A '}' followed by ', {' inside a
    string or a nested object leaves invalid JSON; then the next earlier candidate is tried.
    Candidates that failed stay failed (their bytes do not change), so each call only looks
    at what the last chunk added: a long run without a boundary is read once, not per chunk."""

    def __init__(self, add, parse=json_loads_view):
        # parse: bytes of '[' + events + ']' -> what add takes; ValueError if not JSON
        self.add, self.parse, self.tried_to, self.misses = add, parse, 0, 0
        # after a cut at blanks: None, or what the bytes after the '[' must reach next
        # (b"," then b"{"); blanks up to it lie between events, outside any string
        self.pending = b"["

    def cut(self, buf: bytearray) -> bool:
        """False once cutting is given up (then the rest is parsed at once)."""
        if self.pending is not None and not self._skip_blanks(buf):
            return True
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
            if m is None and end == len(buf) and self._cut_at_blanks(buf, k):
                return True
            if m is not None:
                saved, buf[k + 1] = buf[k + 1], 93   # ']'
                try:
                    with memoryview(buf) as view, view[:k + 2] as prefix:
                        events = self.parse(prefix)
                except ValueError:
                    events = None
                buf[k + 1] = saved
                if events is not None:
                    self.add(events)
                    buf[m.end() - 2] = 91   # '['
                    del buf[:m.end() - 2]
                    return True
            end = k
        return False

    def _cut_at_blanks(self, buf: bytearray, k: int) -> bool:
        """The last '}' followed only by blanks and maybe the ',' or the array's ']': a
        separator wider than _SEP sees. If '[' .. k parses, k ends an event: its events are
        added and the blanks dropped as they stream (a gzip of 200 MB of blanks between two
        events was held whole, 700 MB RSS; 2 GB of them took 6.4 GB). The scan after k only
        covers what came since the last miss (k >= tried_to)."""
        if k + 1 >= len(buf):
            return False
        m = _NOT_SPACE.search(buf, k + 1)
        sep = buf[m.start()] if m is not None else None
        if m is not None and (sep not in (44, 93) or _NOT_SPACE.search(buf, m.start() + 1)):
            return False
        saved, buf[k + 1] = buf[k + 1], 93   # ']'
        try:
            with memoryview(buf) as view, view[:k + 2] as prefix:
                events = self.parse(prefix)
        except ValueError:
            buf[k + 1] = saved
            return False
        self.add(events)
        del buf[1:]
        self.pending = {None: b",", 44: b"{", 93: b"]"}[sep]
        if sep == 93:
            buf += b"]"
        return True

    def _skip_blanks(self, buf: bytearray) -> bool:
        """Drops the blanks after the '[' (or the '[]' of a closed array) while a separator
        is pending: they lie between events, outside any string. True once what follows
        them is in the buffer."""
        start = 2 if self.pending == b"]" else 1
        while True:
            m = _NOT_SPACE.search(buf, start)
            if m is None:
                del buf[start:]
                return False
            at, c = m.start(), buf[m.start()]
            if self.pending == b"," and c == 44:
                del buf[1:at + 1]
                self.pending = b"{"
                continue
            # '[' + '{': the next event; '[' + ']': the array ends. Anything else is damage
            # the whole parse names (the comma is put back: "[ev, ]" stays invalid)
            buf[start:at] = b"," if self.pending == b"{" and c != 123 else b""
            self.pending = None
            return True
