"""common: where an output may be written. A report or a Perfetto file written over the
person's own trace, a notebook or a saved run destroyed what they came to look at (issue
36), and a target that cannot take the bytes (/dev/full, a folder without write access)
was found only after the work. ``output_refusal`` says why not, in one line, before any
work; the writers and the command line share it."""
from __future__ import annotations

import errno
import gzip
import os
import stat
import tempfile
import zlib
from pathlib import Path

MARK = "nbtools_written_by"
"""Key in a file nbtools writes (to_perfetto's otherData, first in the file), so a reader
of a folder of traces can tell its own output from a rank's trace."""
_HEAD = 4096   # the mark sits in the first bytes; a profiler's metadata fits in this too


def head(path, n: int = _HEAD) -> bytes:
    """The first ``n`` bytes of a regular file, decompressed when it is gzip; b"" when it
    cannot be read (callers only look for markers in it)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(n)
        if raw[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as fh:
                return fh.read(n)
        return raw
    except (OSError, EOFError, zlib.error):
        return b""


def written_by_nbtools(path) -> bool:
    """True for a file nbtools' to_perfetto wrote (its mark in the first bytes)."""
    return f'"{MARK}"'.encode() in head(path)


def not_a_file(path) -> str:
    """Why ``path`` cannot be read as a file, in words ("a pipe (FIFO)", "a link that
    loops", ...), or "" for a regular file. A FIFO blocks a read forever and a device
    (/dev/zero) never ends, so they are named, not opened."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        return "a link to a missing file" if p.is_symlink() else "no such file"
    except PermissionError:
        return "not readable (permission denied on a folder above it)"
    except OSError as e:   # ELOOP: a symlink loop, ENAMETOOLONG, ...
        return "a link that loops (it points back to itself)" if e.errno == errno.ELOOP else \
            f"not readable ({e.strerror or e})"
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return ""
    if stat.S_ISDIR(mode):
        return "a folder"
    what = "a pipe (FIFO)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) \
        else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"
    return f"{what}{' (a link to ' + os.path.realpath(p) + ')' if p.is_symlink() else ''}"


def _is_trace(path) -> bool:
    h = head(path)
    return b'"traceEvents"' in h or h.lstrip()[:1] == b"["


def output_refusal(path, knob: str = "force=True", inputs=(), force: bool = False) -> str:
    """Why ``path`` must not be written (one line naming it and what to do), or "".
    Always refused: one of ``inputs`` (the files being read now), a folder, something that
    is not a regular file (a device such as /dev/full, a pipe), a place that cannot be
    written. Refused unless ``force``: an existing notebook, a file of a saved run, a
    profiler trace nbtools did not write. ``knob`` is how the caller's user says force."""
    p = Path(path).expanduser()
    for f in inputs:
        try:
            same = p.exists() and os.path.samefile(p, f)
        except OSError:
            same = False
        if same:
            return (f"{path}: is one of the files being read ({Path(f).name}); writing there "
                    "would replace it. Give another file name")
    if p.is_dir():
        return f"{path}: is a folder; give a file name"
    if not p.parent.is_dir():
        return f"{path}: folder {p.parent} does not exist"
    if os.path.lexists(p):
        why = not_a_file(p)
        if why:
            return (f"{path}: is {why}, not a file to write to (a device or pipe takes no "
                    "report); give a file name")
        why = _cannot_write(lambda: open(p, "ab").close())   # opened, nothing written
        if why:
            return f"{path}: cannot be written ({why}); give another file name"
        if not force:
            what = "a notebook" if p.suffix == ".ipynb" else \
                f"a file of the saved run in {p.parent}" if _saved_run(p.parent) \
                else "a profiler trace" if p.name.endswith((".json", ".json.gz")) and \
                _is_trace(p) and not written_by_nbtools(p) else ""
            if what:
                return (f"{path}: is {what}; writing there would replace it. Give another "
                        f"file name, or {knob} to replace it")
    else:
        why = _cannot_write(lambda: tempfile.TemporaryFile(dir=p.parent).close())
        if why:
            return f"{path}: folder {p.parent} cannot be written ({why}); give another place"
    return ""


def _saved_run(folder: Path) -> bool:
    """A run folder (Run.save): run.json beside its tables. A run.json alone is a name a
    person gives to_perfetto's file (the README does)."""
    return (folder / "run.json").is_file() and any(
        (folder / f"{t}.parquet").exists() for t in ("summary", "events", "steps"))


def _cannot_write(attempt) -> str:
    """Tried, not asked (os.access): root passes every permission check yet cannot write
    /proc, and a read-only mount says so only on the attempt."""
    try:
        attempt()
    except OSError as e:
        return e.strerror or type(e).__name__
    return ""
