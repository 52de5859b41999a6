"""common: where an output may be written. A report or a Perfetto file written over the
person's own trace, a notebook or a saved run destroyed what they came to look at (issue
36); `run --html README.md` replaced a tracked README with 2 MB of HTML (issue 44); a
target that cannot take the bytes (/dev/full, a folder without write access) was found only
after the work. So nbtools replaces only files that carry its mark (``mark_html``, MARK in
a JSON's first key, the notebook metadata key) unless forced, and ``output_refusal`` says
why not, in one line, before any work; the writers and the command line share it. How the
bytes land (whole or not at all) is common/atomic.py."""
from __future__ import annotations

import errno
import gzip
import os
import stat
import tempfile
import zlib
from pathlib import Path

MARK = "nbtools_written_by"
"""Key in a file nbtools writes (to_perfetto's otherData, first in the file; a comment
after an HTML page's doctype), so a reader of a folder of traces can tell its own output
from a rank's trace, and a later write knows the file is its own to replace."""
KINETO_MARK = "nbtools_exported_by"
"""The mark of a per-rank Kineto trace nbtools wrote (write_kineto): its own to replace, but
a trace to read (a folder of them is viewed), so not MARK."""
NOTEBOOK_MARK = "nbtools_written_by"
"""Key in a notebook's metadata written by `nbtools export --save-ipynb`."""
_HEAD = 4096   # the mark sits in the first bytes; a profiler's metadata fits in this too
_MAX_NOTEBOOK = 64 << 20   # a notebook's metadata is read whole; past this it is not ours


def mark_html(page: str, what: str) -> str:
    """``page`` with nbtools' mark as a comment right after its doctype (within the first
    bytes, where ``nbtools_file`` looks; BokehJS inlined in the head comes later)."""
    note = f'<!-- "{MARK}": "torch-nbtools ({what})" -->'
    head, sep, rest = page.partition(">")
    if head.lstrip().lower().startswith("<!doctype"):
        return f"{head}{sep}\n{note}{rest}"
    return f"{note}\n{page}"


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
    """True for an output nbtools wrote that is not a trace to read (to_perfetto's file, a
    report): its MARK in the first bytes. A folder of traces skips these."""
    return f'"{MARK}"'.encode() in head(path)


def nbtools_file(path) -> bool:
    """True for a file nbtools wrote, so a later write may replace it: a report, a Perfetto
    or Kineto trace (their marks in the first bytes), a notebook `nbtools export` saved."""
    if Path(path).suffix == ".ipynb":
        return _marked_notebook(path)
    first = head(path)
    return f'"{MARK}"'.encode() in first or f'"{KINETO_MARK}"'.encode() in first


def _marked_notebook(path) -> bool:
    import json
    try:
        if os.path.getsize(path) > _MAX_NOTEBOOK:
            return False
        with open(path, "rb") as fh:
            meta = json.loads(fh.read()).get("metadata")
    except (OSError, ValueError, RecursionError, AttributeError):
        return False
    return isinstance(meta, dict) and NOTEBOOK_MARK in meta


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


def output_refusal(path, knob: str = "force=True", inputs=(), force: bool = False,
                   parents: bool = False, histories=()) -> str:
    """Why ``path`` must not be written (one line naming it and what to do), or "".
    Always refused: one of ``inputs`` (the files being read now), a folder, something that
    is not a regular file (a device such as /dev/full, a pipe), a place that cannot be
    written. Refused unless ``force``: any existing file nbtools did not write (a
    notebook, a file of a saved run, a profiler trace, a README: named as what it is).
    ``knob`` is how the caller's user says force; ``parents``: a missing folder is made by
    the writer (its nearest existing folder must take it). ``histories``: history folders
    being read or written; a path inside one of their run folders is always refused."""
    p = Path(path).expanduser()
    run = _in_a_run(p, histories)
    if run is not None:
        # --force replaced summary.parquet with the report: the run was then damaged
        return (f"{path}: is inside {run}, a saved run of the history being read; writing "
                "there would damage the run. Give a file name outside its run folders")
    for f in inputs:
        try:
            same = p.exists() and os.path.samefile(p, f)
        except OSError:
            same = False
        if same:
            what = "the notebook" if p.suffix == ".ipynb" else "it"
            return (f"{path}: is one of the files being read ({Path(f).name}); writing there "
                    f"would replace {what}. Give another file name")
    if p.is_dir():
        return f"{path}: is a folder; give a file name"
    if not p.parent.is_dir():
        top = next((a for a in p.parents if os.path.lexists(a)), None)
        if top is not None and not top.is_dir():
            return f"{path}: {top} is a file, not a folder; give a path in a folder"
        if not parents or top is None:
            return f"{path}: folder {p.parent} does not exist"
        why = _cannot_write(lambda: tempfile.TemporaryFile(dir=top).close())
        return f"{path}: folder {top} cannot be written ({why}); give another place" if why \
            else ""
    if os.path.lexists(p):
        why = not_a_file(p)
        if why:
            return (f"{path}: is {why}, not a file to write to (a device or pipe takes no "
                    "report); give a file name")
        why = _cannot_write(lambda: open(p, "ab").close())   # opened, nothing written
        if why:
            return f"{path}: cannot be written ({why}); give another file name"
        if not force and not nbtools_file(p):
            what = "a notebook" if p.suffix == ".ipynb" else \
                f"a file of the saved run in {p.parent}" if _saved_run(p.parent) \
                else "a profiler trace" if p.name.endswith((".json", ".json.gz")) and \
                _is_trace(p) else "a file nbtools did not write (it carries no nbtools mark)"
            return (f"{path}: is {what}; writing there would replace it. Give another "
                    f"file name, or {knob} to replace it")
    # written beside its place and renamed there (common/atomic.py): the folder must take a file
    why = _cannot_write(lambda: tempfile.TemporaryFile(dir=p.resolve().parent).close())
    if why:
        return f"{path}: folder {p.parent} cannot be written ({why}); give another place"
    return ""


def _in_a_run(p: Path, histories) -> "Path | None":
    """The run folder (a saved run, or one whose save was cut) of ``histories`` that holds
    ``p`` at any depth, or None."""
    try:
        where = p.resolve()
    except (OSError, RuntimeError):   # a loop of links: the writer's own check says so
        return None
    for h in histories:
        try:
            top = Path(h).expanduser().resolve()
        except (OSError, RuntimeError):
            continue
        if where == top or top not in where.parents:
            continue
        for folder in where.parents:
            if folder == top:
                break
            if _saved_run(folder) or (folder / "run.json").is_file():
                return folder
    return None


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
