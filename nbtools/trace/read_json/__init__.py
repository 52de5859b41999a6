"""trace: streaming reader of the Kineto/Chrome trace JSON any PyTorch job writes -> raw
columns (kineto.RAW), batch by batch, so parsed dicts never outlive their batch and memory
stays near the size of the columns. Plain or gzip, object or bare-array format.

Damaged input is either refused with a TraceError that says what is wrong, or loaded with
the damage counted in ``Columns.problems`` (load_traces turns them into the run's flags).
Bounds: every scan is linear in the file (scan.py), the decompressed size is capped
(``max_gb``), leading blanks are capped (scan.MAX_BLANK), blanks between events are dropped
as they stream and a run of them held anywhere else is capped (scan.MAX_HELD_BLANK), and what
is kept is seven numeric columns of the span ('X') events."""
from __future__ import annotations

import gc
import json
import math
import zlib
from pathlib import Path

try:   # ISA-L's inflate: the same API as zlib's, twice as fast (0.027 s vs 0.056 s CPU
    # for the 51 MB df_index_resolver trace); zlib where it is missing
    from isal import isal_zlib as _zlib
    _ZLIB_ERRORS = (zlib.error, _zlib.error)
except ImportError:  # pragma: no cover - isal is a dependency
    _zlib, _ZLIB_ERRORS = zlib, (zlib.error,)

from nbtools.trace.read_json.columns import Columns, hashable, short_repr, parse  # noqa: F401
from nbtools.trace.read_json.scan import (MAX_HELD_BLANK, RankUnknown, TraceError, Cutter,  # noqa: F401
                                          Head, json_loads)

MAX_GB = 4.0
"""Default cap on a trace's decompressed size: far above what torch.profiler writes for one
rank, low enough that a damaged or hostile .gz (gigabytes of whitespace) stops with a clear
message instead of running for minutes. ``load_traces(..., max_gb=...)`` raises it
(``float('inf')``: no cap)."""

# 256 KiB batches: each holds ~1,000 events, whose dicts die before the next batch is
# parsed. 1 MiB batches (fewer per-batch costs) took added RSS past the JSON's own size on
# two traces (1.23x on the 9.3 MiB nccl_parser_config; docs/benchmarks.md)
_CHUNK = 1 << 18
_GZ_IN = 1 << 16


def _chunks(path: Path, max_bytes: float, problems: dict):
    """Decompressed pieces of about _CHUNK bytes (gzip detected by its magic bytes); a
    TraceError past ``max_bytes`` in all."""
    total = 0
    for piece in _pieces(path, problems):
        total += len(piece)
        if total > max_bytes:
            raise TraceError(
                f"{path}: holds more than {max_bytes / 2**30:.3g} GB of JSON once decompressed "
                "(a damaged file, or one that is mostly padding). If this trace really is that "
                "large, pass load_traces(..., max_gb=N) with a larger N.")
        yield piece


def _pieces(path: Path, problems: dict):
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        if not gz:
            while piece := fh.read(_CHUNK):
                yield piece
            return
        d, data = _zlib.decompressobj(31), b""
        while True:
            if not data and not (data := fh.read(_GZ_IN)):
                break
            piece = d.decompress(data, _CHUNK)
            if piece:
                yield piece
            if d.eof:   # concatenated gzip members are one file
                data = d.unused_data or fh.read(_GZ_IN)
                if not data.strip(b"\0"):
                    return
                if not data.startswith(b"\x1f\x8b"[:len(data)]):
                    # bytes after a complete member that are no gzip: the data is whole
                    # (its CRC checked), the tail is not read further
                    rest = len(data) + len(fh.read(1 << 20))
                    problems["bytes after the end of the gzip data"] = [
                        rest, short_repr(data[:16]), "ignored (the trace before them is complete)"]
                    return
                d = _zlib.decompressobj(31)
            else:
                data = d.unconsumed_tail
        if not d.eof:
            raise EOFError("the compressed data ends early (truncated .gz)")


def read_trace(path, max_gb: float = MAX_GB) -> tuple[dict, Columns]:
    """One Kineto JSON file -> (top-level metadata, raw columns), streaming: the events
    array is cut at event boundaries into small batches, each parsed and reduced to columns
    before the next is read, so memory stays near the size of the columns."""
    path = Path(path)
    cols = Columns()
    head, buf, streaming, finder, cutter = None, bytearray(), True, Head(), Cutter(cols.add, parse)
    max_bytes = max_gb * 2**30 if math.isfinite(max_gb) else math.inf
    was_enabled = gc.isenabled()
    gc.disable()   # batches are acyclic dicts: collections would rescan them for nothing
    held_blank = 0
    try:
        for chunk in _chunks(path, max_bytes, cols.problems):
            buf += chunk
            held_blank = held_blank + len(chunk) if chunk.isspace() else 0
            if held_blank > MAX_HELD_BLANK and len(buf) > MAX_HELD_BLANK:
                raise TraceError(
                    f"holds more than {MAX_HELD_BLANK >> 20} MB of blanks in a row inside an "
                    "event or its metadata, where they cannot be skipped: it is not a trace a "
                    "profiler writes (a damaged or padded file). Export the trace again.")
            if head is None and (found := finder.find(buf)) is not None:
                head, at = found   # from here on buf starts with the events array's '['
                del buf[:at]
            if head is not None and streaming:
                streaming = cutter.cut(buf)
        doc = _parse(path, (head or b"") + bytes(buf), cut=bool(cols.parts),
                     blank=finder.blank)
    except TraceError as e:
        if str(e).startswith(str(path)):
            raise
        raise TraceError(f"{path}: {e}") from None
    except PermissionError:
        raise TraceError(f"{path}: cannot be read: permission denied. Ask for read access "
                         "(chmod +r), or copy it to a place you can read") from None
    except (OSError, EOFError, *_ZLIB_ERRORS) as e:
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


def _parse(path: Path, text: bytes, cut: bool, blank: int = 0):
    """The rest of the document. orjson refuses some valid JSON (integers beyond 64 bits,
    lone surrogates) and the NaN/Infinity Python's json writes; the standard library reads
    those, so only what it refuses too is called invalid, with where and why."""
    try:
        return json_loads(text)
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
            what = f"holds only {blank / 2**20:.0f} MB of blanks" if blank > 2**20 else \
                "is empty"
            raise TraceError(f"{path}: {what} (not valid JSON). The profiler may have been "
                             "stopped before writing: export the trace again.") from None
        # a cut inside a string reports the string's start, not the end
        if pos >= len(text.rstrip()) - 1 or msg.startswith("Unterminated string"):
            raise TraceError(f"{path}: is not valid JSON: it ends early ({msg}). The file may "
                             "be truncated (the profiler was stopped while writing): export "
                             "the trace again.") from None
        near = text[max(0, pos - 30):pos + 30].decode("utf-8", "replace")
        raise TraceError(f"{path}: is not valid JSON: {msg} near {near!r}. The file is "
                         "damaged in the middle, not cut short: export the trace again.") from None
