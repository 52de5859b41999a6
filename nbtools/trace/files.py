"""trace: which files of a path are traces to read. The one place that says it (load_traces
and `nbtools view` both ask here). In a folder, a name ending .json/.json.gz that is not a
regular file (a pipe would block the read forever, a link to /dev/zero never ends, a link
may loop) or that nbtools wrote itself (to_perfetto's file, not a rank's trace) is skipped
and named with the reason, never dropped without a word."""
from __future__ import annotations

import os
from pathlib import Path

from nbtools.common.outputs import not_a_file, written_by_nbtools
from nbtools.trace.read_json import TraceError, short_repr

SUFFIXES = (".json", ".json.gz")


def trace_files(path) -> tuple[list, list]:
    """(files to read, [(path, why skipped)]) of a file, a folder or a list of them. A
    named file that cannot be one, a folder without traces: TraceError saying so."""
    items = list(path) if isinstance(path, (list, tuple)) else [path]
    files, skipped = [], []
    for item in items:
        try:
            p = Path(item).expanduser()
        except TypeError:
            raise TraceError(f"{short_repr(item)} is not a path: give a file, a folder or a list "
                             "of them") from None
        if p.is_dir():
            found, passed = _in_folder(p)
            if not found:
                if passed:
                    raise TraceError(f"{p}: no trace here could be read: " + "; ".join(
                        f"{q.name} {why}" for q, why in passed))
                raise TraceError(f"{p}: no .json or .json.gz trace files in this folder")
            files += found
            skipped += passed
            continue
        why = not_a_file(p)
        if why == "no such file":
            raise TraceError(f"{p}: no such file or folder")
        if why:
            raise TraceError(f"{p}: is {why}, not a trace file; give the .json/.json.gz "
                             "file the profiler wrote (copy it out of the pipe or device)")
        files.append(p)
    if not files:
        raise TraceError("no trace files given")
    return files, skipped


def _in_folder(folder: Path) -> tuple[list, list]:
    found, skipped = [], []
    try:
        names = sorted(e.name for e in os.scandir(folder))
    except OSError as e:
        raise TraceError(f"{folder}: cannot be listed ({e.strerror or e})") from None
    for name in names:
        if not name.endswith(SUFFIXES):
            continue
        q = folder / name
        why = not_a_file(q)
        if why == "a folder":
            continue   # a folder named like a trace holds no events of its own
        if why:
            skipped.append((q, f"is {why}, not a trace file: skipped"))
        elif written_by_nbtools(q):
            skipped.append((q, "was written by nbtools (to_perfetto), not by a rank's "
                               "profiler: skipped"))
        else:
            found.append(q)
    return found, skipped
