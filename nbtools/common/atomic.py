"""common: every file and run folder nbtools writes lands whole or not at all. It is written
under a temporary name beside its place and renamed there at the end (a rename within one
folder is atomic), so a full disk, an error or a Ctrl-C part-way leaves what was there
before whole; the error names the file (``WriteFailed``). Until issue 44 reports and traces
were written in place: a full disk left an earlier good report cut to 4 KB, with an OSError
naming no file."""
from __future__ import annotations

import errno
import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path

TMP_SUFFIX = ".nbtools-tmp"        # a file being written: .NAME.<random>.nbtools-tmp
PARTIAL_SUFFIX = ".nbtools-partial"   # a run folder being written: .NAME.<random>.nbtools-partial
_OLD_SUFFIX = ".nbtools-old"       # a folder being replaced, for the moment of the swap
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def disk_full(e: OSError) -> bool:
    """A write refused for room: the disk or quota is full, or the file-size limit
    (RLIMIT_FSIZE, ``ulimit -f``) is reached."""
    return e.errno in _FULL


class WriteFailed(OSError):
    """A write that did not complete, said in one line: the file, why, and that the file there
    before (if any) is unchanged. An OSError (errno, strerror and filename as the cause's)."""

    def __init__(self, path, cause: OSError, existed: bool):
        code = cause.errno
        why = os.strerror(code) if code else (cause.strerror or str(cause) or type(cause).__name__)
        super().__init__(code, why, str(path))
        self.path, self.existed = Path(path), existed

    def __str__(self) -> str:
        kept = "the file there before is unchanged" if self.existed else "nothing was left there"
        todo = "give another place" if self.errno not in _FULL else \
            "free space on that disk (or raise the file-size limit, `ulimit -f`), or give " \
            "another place" if self.errno == errno.EFBIG else \
            "free space on that disk, or give another place"
        return f"{self.path}: could not be written ({self.strerror}); {kept}: {todo}"


def _beside(path: Path, suffix: str) -> Path:
    """A hidden name in ``path``'s folder, unique, within the 255 bytes a name may have."""
    stem = path.name.encode()[:180].decode(errors="ignore")
    return path.with_name(f".{stem}.{secrets.token_hex(4)}{suffix}")


@contextmanager
def atomic_path(path):
    """A temporary path beside ``path`` for a writer that takes a path (pyarrow, nbformat);
    when the block ends it is flushed to disk and renamed onto ``path`` (keeping the old
    file's permissions). Any OSError in the block or the rename is a ``WriteFailed`` naming
    ``path``; the temporary file is removed and ``path`` is as it was, whatever stopped it
    (a KeyboardInterrupt too)."""
    path = Path(path).expanduser()
    if path.is_symlink():       # the file it points to is replaced; the link stays a link
        path = Path(os.path.realpath(path))
    existed = os.path.lexists(path)
    tmp = _beside(path, TMP_SUFFIX)
    try:
        yield tmp
        _sync(tmp)
        if existed:
            try:
                shutil.copymode(path, tmp)
            except OSError:
                pass       # a link to nowhere, no permission to read it: the new file's own mode
        os.replace(tmp, path)
    except WriteFailed:
        raise
    except OSError as e:
        raise WriteFailed(path, e, existed) from e
    finally:
        if os.path.lexists(tmp):
            try:
                os.unlink(tmp)
            except OSError:
                pass


def write_file(path, data, encoding: str = "utf-8", errors: str = "strict",
               parents: bool = False) -> Path:
    """``data`` (bytes, or str in ``encoding``) written to ``path`` whole or not at all
    (``atomic_path``); ``parents``: missing folders above it are made. Returns the path."""
    raw = data if isinstance(data, (bytes, bytearray, memoryview)) else \
        str(data).encode(encoding, errors)
    if parents:
        try:
            Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise WriteFailed(path, e, False) from e
    with atomic_path(path) as tmp:
        with open(tmp, "xb") as fh:
            fh.write(raw)
    return Path(path).expanduser()


@contextmanager
def atomic_folder(folder, replaceable=lambda folder: False,
                  foreign: str = "holds files nbtools did not write there"):
    """A temporary folder beside ``folder``, renamed to ``folder`` when the block ends: a
    reader sees the whole folder or none (a run saved into a history). An existing
    ``folder`` is replaced only when it is empty or ``replaceable(folder)`` says it is one
    of ours (else FileExistsError saying it is ``foreign``, before the block runs); the
    swap renames the old one aside first, so at every moment one whole copy is on disk. An
    OSError is a WriteFailed naming ``folder``; on any error the temporary folder goes."""
    folder = Path(folder).expanduser()
    _refuse_foreign(folder, replaceable, foreign)
    existed = folder.exists()
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = _beside(folder, PARTIAL_SUFFIX)
        tmp.mkdir()
    except OSError as e:
        raise WriteFailed(folder, e, existed) from e
    try:
        yield tmp
        for p in tmp.rglob("*"):
            if p.is_file() and not p.is_symlink():
                _sync(p)
        _refuse_foreign(folder, replaceable, foreign)     # made meanwhile by someone else
        if not folder.exists():
            os.rename(tmp, folder)
        elif not any(folder.iterdir()):
            os.rmdir(folder)
            os.rename(tmp, folder)
        else:
            old = _beside(folder, _OLD_SUFFIX)
            os.rename(folder, old)
            os.rename(tmp, folder)
            shutil.rmtree(old, ignore_errors=True)
    except (WriteFailed, FileExistsError):
        raise
    except OSError as e:
        raise WriteFailed(folder, e, existed) from e
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _refuse_foreign(folder: Path, replaceable, foreign: str) -> None:
    if not folder.exists():
        return
    if not folder.is_dir():
        raise FileExistsError(f"{folder}: is a file; give a new or empty folder")
    if any(folder.iterdir()) and not replaceable(folder):
        raise FileExistsError(f"{folder}: {foreign}; give a new or empty folder")


def _sync(path: Path) -> None:
    """Data on disk before the rename: a disk that fills late (network and quota file
    systems report it at flush) fails here, while the old file is still in place."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
