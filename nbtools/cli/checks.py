"""What the command line checks before any work, the one-line error it stops with, and
``say``: every line the command line prints goes through terminal_text (file names, event
names and notebook text are the person's and may hold escape sequences)."""
from __future__ import annotations

import contextlib
import sys

from nbtools.common.text import terminal_text


def say(*lines, err: bool = False) -> None:
    """Print lines with terminal control characters made visible."""
    print(*(terminal_text(line) for line in lines), sep="\n",
          file=sys.stderr if err else sys.stdout, flush=True)


class UserError(Exception):
    """Bad input the user can fix from its one-line message."""


def one_line(e: BaseException) -> str:
    """An error as one line for the terminal: ``file: reason`` for an OSError, else its
    text with whitespace collapsed (its type's name when it has none)."""
    from nbtools.common.atomic import WriteFailed
    if isinstance(e, OSError) and e.filename is not None and e.strerror \
            and not isinstance(e, WriteFailed):     # WriteFailed says more than that
        return f"{e.filename}: {e.strerror}"
    return " ".join(str(e).split()) or type(e).__name__


def need_rounds(n: int) -> None:
    """`run --rounds N`: a whole number of rounds, at least one (the option's old spelling
    --repeats still works, but the message names the one --help shows)."""
    if n < 1:
        raise UserError(f"--rounds {n}: give a whole number >= 1 (each round runs every "
                        "config twice, A B B A; --rounds 1 runs each config once)")


def need_device(cfgs, engines: str, n) -> None:
    """A config's rules for the ranks' device, before any engine starts wherever the
    device is known up front: local engines run one per visible GPU, else on CPU
    (``cudagraph='manual'`` on CPU ranks was refused only after the lab had started).
    Other launchers' engines say their device when they join; the lab checks there,
    before the first run (Lab.check)."""
    if engines != "local":
        return
    from nbtools.lab.placement import count
    device = "cuda" if count(engines, n)[1] else "cpu"
    for cfg in cfgs:
        cfg.check_device(device)


def need_folder(path, what: str, must_exist: bool) -> None:
    """UserError unless ``path`` can be a folder ``what``: it exists when ``must_exist``, and
    is not a file or a broken link (said as such rather than "no such")."""
    from pathlib import Path
    from nbtools.common.outputs import not_a_file
    p = Path(path).expanduser()
    if must_exist and not p.exists():
        why = not_a_file(p)     # a dangling or looping link is not "no such" folder
        raise UserError(f"{path}: no such {what}" if why == "no such file" else
                        f"{path}: is {why}, not a {what}")
    if p.exists() and not p.is_dir():
        why = not_a_file(p) or "a file"
        raise UserError(f"{path}: is {why}, not a {what}")


def need_notebook(path):
    """The notebook, read and checked before a kernel starts; one line on what is wrong."""
    from pathlib import Path
    from nbtools.common.outputs import not_a_file
    from nbtools.report.notebook import NotebookUnreadable, read_notebook
    why = not_a_file(Path(path))
    if why == "no such file":
        raise UserError(f"{path}: no such notebook")
    if why:
        raise UserError(f"{path}: is {why}, not a notebook (.ipynb)")
    try:
        return read_notebook(path)
    except NotebookUnreadable as e:
        raise UserError(str(e)) from None


def need_outputs(outputs, inputs=(), force: bool = False, histories=()) -> None:
    """Each (flag, path) of ``outputs`` may be written, before any work: never over one of
    ``inputs`` (the traces or notebook being read) or over another output; never over a file
    nbtools did not write (a notebook, a saved run's file, a trace, a README) without
    --force; never inside a run folder of ``histories`` (the history read or written). A report path in a missing folder, on a device (/dev/full) or without write
    permission would otherwise fail only after the whole sweep or notebook ran."""
    from pathlib import Path
    from nbtools.common.outputs import output_refusal
    seen = {}
    for flag, path in outputs:
        if not path:
            continue
        why = output_refusal(path, "--force", inputs=inputs, force=force, histories=histories)
        if why:
            raise UserError(f"{flag + ': ' if flag else ''}{why}")
        key = Path(path).expanduser().resolve()
        if key in seen:
            raise UserError(f"{flag}: {path} is also {seen[key]}'s file; give each output "
                            "its own name")
        seen[key] = flag


def write_failed(path, e: OSError) -> "UserError":
    """A write that failed after the checks (a disk that filled up): one line, no
    traceback. nbtools writes whole files or none (common/atomic.py), so the file there
    before is as it was."""
    from nbtools.common.atomic import WriteFailed
    if isinstance(e, WriteFailed):
        return UserError(str(e))
    return UserError(f"{path}: could not be written ({e.strerror or e}); free space, or "
                     "give another place")


MIN_FREE = 16 << 20
"""Free bytes a lab needs where it writes (engines' connection files and logs, the first
runs' tables): below this the disk is as good as full. On a full disk a lab's start failed
with three tracebacks from ipyparallel's engines (issue 44)."""


def need_space(places) -> None:
    """Each (folder, what it holds, how to move it) has room, checked before a lab starts:
    a full disk is one line naming the folder, not engines dying on their first write."""
    import os
    from pathlib import Path
    for folder, what, move in places:
        if not folder:
            continue
        p = Path(folder).expanduser()
        top = next((a for a in (p, *p.parents) if a.exists()), None)
        if top is None:
            continue
        try:
            st = os.statvfs(top)
        except OSError:
            continue      # the writes will say what is wrong with it
        free = st.f_bavail * st.f_frsize
        if free < MIN_FREE or (st.f_files and not st.f_favail):
            left = f"{free / 2**20:.1f} MB free" if free else "no space left"
            if free >= MIN_FREE:
                left = "no file entries (inodes) left"
            raise UserError(f"{p}: its disk is full ({left}; {what} needs at least "
                            f"{MIN_FREE >> 20} MB): free space, or {move}")


def lab_places(args) -> list:
    """Where a lab started by `run`/`demo` writes: (folder, what, how to move it)."""
    import os
    import tempfile
    return [(tempfile.gettempdir(), "the lab's engines' files (its temp folder)",
             "point TMPDIR at another disk"),
            (os.environ.get("IPYTHONDIR") or "~/.ipython", "ipyparallel's profile",
             "point IPYTHONDIR at another disk"),
            (args.history, "the history of runs", "give --history on another disk"),
            (args.compile_cache or os.environ.get("NBTOOLS_COMPILE_CACHE"),
             "the compile cache", "give --compile-cache on another disk")]


@contextlib.contextmanager
def one_line_warnings():
    """nbtools' own warnings (a run that could not be saved) as one line on stderr while
    the command runs; other libraries' as Python shows them."""
    import os
    import warnings
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    show = warnings.showwarning

    def line(message, category, filename, lineno, file=None, text=None):
        if os.path.abspath(filename).startswith(package):
            say(f"warning: {message}", err=True)
        else:
            show(message, category, filename, lineno, file, text)
    with warnings.catch_warnings():
        warnings.showwarning = line
        yield
