"""What the command line checks before any work, and the one-line error it stops with."""
from __future__ import annotations


class UserError(Exception):
    """Bad input the user can fix from its one-line message."""


def one_line(e: BaseException) -> str:
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return f"{e.filename}: {e.strerror}"
    return " ".join(str(e).split()) or type(e).__name__


def need_folder(path, what: str, must_exist: bool) -> None:
    from pathlib import Path
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise UserError(f"{path}: is a file, not a {what}")
    if must_exist and not p.exists():
        raise UserError(f"{path}: no such {what}")


def need_writable_parent(path) -> None:
    """Checked before any work: a report path in a missing folder would otherwise fail only
    after the whole sweep or notebook ran."""
    if not path:
        return
    from pathlib import Path
    p = Path(path).expanduser()
    if p.is_dir():
        raise UserError(f"{path}: is a folder; give a file name")
    if not p.parent.is_dir():
        raise UserError(f"{path}: folder {p.parent} does not exist")
