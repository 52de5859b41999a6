"""Run history: on the client and on disk, never only on the engines (an engine stuck in a
collective can only be restarted). Each run is saved as it completes, failed ones too.

One damaged run folder never costs the others: ``History.load`` lists it in ``damaged``
with the reason and loads every other run; a run missing a table loads with that table
empty and a ``damaged: ...`` flag. Folder numbers are claimed atomically, so two writers
(two notebooks, a notebook and the CLI) on one folder never share a number. A run folder
is written whole or not at all (a hidden ``*.nbtools-partial`` folder renamed into place),
so a folder is a run only with its run.json; a partial one a killed process left behind
is listed in ``damaged``, never counted as a run."""
from __future__ import annotations

import os
import re
import stat
import warnings
from pathlib import Path
from typing import Optional

from nbtools.analysis.metrics import HISTORY, combine, is_count
from nbtools.common.atomic import PARTIAL_SUFFIX, WriteFailed
from nbtools.common.interrupts import held
from nbtools.results.run import Run

_NUMBERED = re.compile(r"^(\d{4,})-")
_CLAIMS = ".numbers"   # one empty file per claimed number (created with O_EXCL)
# run.json holds the config, env, flags and each rank's notes (the tables are parquet): tens
# of KB for a lab run, a few MB with many ranks' warnings. Past this it is not one of ours,
# and reading it (a link to /dev/zero, a runaway file) would cost memory for nothing.
MAX_RUN_JSON = 256 << 20


def _is_history(folder: Path) -> bool:
    """A folder a History saved runs in: numbered run folders inside."""
    try:
        return any(_NUMBERED.match(p.name) and p.is_dir() for p in folder.iterdir())
    except OSError:
        return False


class History:
    """The runs of a lab (``lab.history``) or of a folder: kept in memory and saved as each
    completes, failed ones too, so they outlive the kernel and any stuck engine.

    Index it by position or by run id; ``table()`` lists them; ``damaged``, ``nested`` and
    ``skipped`` say what a ``load`` did not take and why.

    Example:
        >>> from nbtools import History
        >>> h = History.load("nbtools-runs")
        >>> h.table[["run", "status", "label", "step_ms"]]
        >>> h[-1], h["3f9a0c12"]         # the last run; a run by its id
    """
    def __init__(self, folder=None):
        self.folder = Path(folder) if folder is not None else None
        self.runs: list[Run] = []
        self.damaged: list[tuple[str, str]] = []
        """(folder name, why) for each run folder that could not be loaded at all."""
        self.nested: list[tuple[str, int]] = []
        """(subfolder, runs) for each history folder inside this one (load(nested=True))."""
        self.skipped: list[tuple[str, str]] = []
        """(folder name, why) for each folder not loaded on purpose (a link to a run
        folder already loaded: one run is one row, however many names it has)."""

    def add(self, run: Run) -> Run:
        """Keep the run here, then save it. A finished run is never lost to a failed save
        (folder removed, disk full): it stays in memory with a warning saying so. The save
        is whole or absent on disk (Run.save), and a Ctrl-C during it waits for its end
        (common.interrupts): the KeyboardInterrupt then says the run was kept."""
        self.runs.append(run)
        if self.folder is None:
            return run
        with held(f"saving run {run.run_id} to {self.folder} first") as h:
            try:
                folder = run.save(self._claim(run.run_id))
                h.message = (f"Ctrl-C while run {run.run_id} was being saved: it was saved "
                             f"whole to {folder} and kept in memory")
            except Exception as e:  # noqa: BLE001 - whatever the save hit, the run stays
                h.message = (f"Ctrl-C while run {run.run_id} was being saved: the save failed; "
                             "the run is kept in memory")
                why = str(e) if isinstance(e, WriteFailed) else f"{type(e).__name__}: {e}"
                warnings.warn(f"run {run.run_id} could not be saved to {self.folder}: {why}; "
                              f"it is kept in memory (lab.history[{run.run_id!r}]): save it "
                              "with run.save(<a writable folder>)", RuntimeWarning,
                              stacklevel=3)
            h.run = run
        return run

    def _claim(self, run_id: str) -> Path:
        """A new numbered folder for this run, the next number after every one in use. The
        claim is an O_EXCL create, so a second writer that read the same listing gets
        FileExistsError and takes the next number."""
        claims = self.folder / _CLAIMS
        claims.mkdir(parents=True, exist_ok=True)
        used = [int(m.group(1)) for p in self.folder.iterdir() if (m := _NUMBERED.match(p.name))]
        used += [int(p.name) for p in claims.iterdir() if p.name.isdigit()]
        n = max(used, default=-1) + 1
        while True:
            try:
                os.close(os.open(claims / f"{n:04d}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                n += 1
                continue
            return self.folder / f"{n:04d}-{run_id}"

    @classmethod
    def load(cls, folder, nested: bool = False) -> "History":
        """Every run saved in a folder, in order. One damaged run folder never costs the
        others: it goes to ``damaged`` with the reason, and the rest load.

        Args:
            folder: where the runs were saved (``Lab(history=...)``, default nbtools-runs).
                A folder that does not exist yet loads as an empty history.
            nested: also load subfolders that are histories themselves (the tutorials keep
                one each under nbtools-runs/), after the folder's own runs; ``view`` reads
                them so, a Lab never does.

        Returns:
            History: its runs, bound to ``folder`` (runs added later are saved there).

        Raises:
            ConfigError: ``folder`` is not a str or Path.
            NotADirectoryError: ``folder`` is a file.

        Example:
            >>> h = History.load("nbtools-runs", nested=True)
            >>> len(h), h.damaged
        """
        if not isinstance(folder, (str, os.PathLike)):
            from nbtools.config.step_config import ConfigError
            raise ConfigError(f"History.load({_short(folder)}): give the folder the runs were "
                              "saved in, as a str or Path (e.g. History.load('nbtools-runs'))")
        h = cls(folder)
        folder = Path(folder)
        if folder.exists() and not folder.is_dir():
            raise NotADirectoryError(f"{folder}: is a file, not a history folder; give the "
                                     "folder the runs were saved in")
        if not folder.is_dir():
            return h
        entries = sorted(folder.iterdir())
        dirs = [p for p in entries if p.is_dir() and not p.name.startswith(".")]
        h.damaged += [(p.name, "a save that did not finish (the process was killed while "
                               "writing it, or it is being written now): the run it held "
                               "is not here; remove the folder once no lab writes to "
                               f"{folder}") for p in entries if p.name.endswith(PARTIAL_SUFFIX)]
        keep = {}   # real path -> the name it loads under: the folder itself, not a link
        for d in sorted(dirs, key=lambda d: d.is_symlink()):
            keep.setdefault(os.path.realpath(d), d.name)
        for d in dirs:
            name = keep[os.path.realpath(d)]
            if name != d.name:
                h.skipped.append((d.name, f"the same folder as {name} (a link to it): "
                                          "loaded once, as that"))
                continue
            odd = _not_plain_files(d)
            if odd:
                h.damaged.append((d.name, odd))
                continue
            if not (d / "run.json").exists():
                if nested and not _NUMBERED.match(d.name) and _is_history(d):
                    sub = cls.load(d)
                    h.runs += sub.runs
                    h.damaged += [(f"{d.name}/{n}", why) for n, why in sub.damaged]
                    h.skipped += [(f"{d.name}/{n}", why) for n, why in sub.skipped]
                    h.nested.append((d.name, len(sub.runs)))
                    continue
                if _NUMBERED.match(d.name) or any(d.glob("*.parquet")):
                    h.damaged.append((d.name, "no run.json: the run was not saved to the end "
                                              "(the process stopped while writing it, or it is "
                                              "being written now)"))
                continue
            try:
                h.runs.append(Run.load(d))
            except Exception as e:  # noqa: BLE001 - whatever broke, the other runs load
                h.damaged.append((d.name, f"{type(e).__name__}: {e}"))
        return h

    def __getitem__(self, key):
        """A run by its id (``h["9fcee8c5"]``) or position (``h[0]`` the oldest, ``h[-1]``
        the newest; a slice: a list). A key that names no run says which ones there are."""
        import numbers
        if isinstance(key, str):   # by run id
            for r in self.runs:
                if r.run_id == key:
                    return r
            raise KeyError(f"no run with id {key!r} in this history; {self._ids()}")
        if isinstance(key, slice):
            return self.runs[key]
        if isinstance(key, bool) or not isinstance(key, numbers.Integral):
            raise TypeError(f"History[{key!r}]: give a run's id (a str) or its position (an "
                            f"int, -1 for the newest); {self._ids()}")
        n = len(self.runs)
        if not -n <= key < n:
            raise IndexError(f"History[{key}]: " + (
                f"this history holds {n} run(s), at positions 0 to {n - 1} (or -1 to -{n} "
                f"from the newest); {self._ids()}" if n else self._ids()))
        return self.runs[key]

    def _ids(self, most: int = 12) -> str:
        """The ids there are, for an error (the oldest and the newest where there are many)."""
        ids = [r.run_id for r in self.runs]
        if not ids:
            return ("this history is empty: lab.run(...) adds runs, History.load(folder) "
                    "reads saved ones")
        if len(ids) > most:
            return (f"ids, oldest first: {', '.join(ids[:3])}, ... ({len(ids) - most} more), "
                    f"{', '.join(ids[3 - most:])}")
        return f"ids, oldest first: {', '.join(ids)}"

    def compiled_by(self, run: Run) -> Optional[Run]:
        """The run of this history that compiled the graphs ``run`` reused
        (Run.compiled_by), or None: ``run`` built its own, or that run is not here."""
        key = run.compiled_by
        return next((r for r in self.runs if r.run_id == key), None) if key else None

    def __len__(self):
        return len(self.runs)

    def __iter__(self):
        return iter(self.runs)

    @property
    def table(self):
        """One row per run: id, status, label, then metrics.HISTORY (step_ms, recompiles),
        each the run's number as every other surface combines its ranks (metrics.combine);
        then one row per damaged folder (status "damaged", the reason as its label)."""
        import pandas as pd
        rows = []
        for r in self.runs:
            row = dict(run=r.run_id, status=r.status, label=r.label)
            for c in HISTORY:
                v = combine(r.summary, c, r.config)
                if v == v:
                    row[c] = int(v) if is_count(c) else v
            if r.damage:
                row["damage"] = "; ".join(f[len("damaged: "):] for f in r.damage)
            rows.append(row)
        rows += [dict(run=name, status="damaged", label=why) for name, why in self.damaged]
        return pd.DataFrame(rows)

    def __repr__(self):
        bad = f", {len(self.damaged)} damaged" if self.damaged else ""
        return f"<History {len(self.runs)} runs{bad} in {self.folder}>"

    def _repr_html_(self):
        return self.table.to_html(index=False)


def _short(v) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def _not_plain_files(d: Path) -> str:
    """Why the folder's files cannot be read safely, or "". Only the folder's own entries
    are looked at (one stat each, following links): a FIFO would block the read forever, a
    link to /dev/zero or /dev/urandom would read until memory ran out, so anything that is
    not a regular file (or a subfolder) is refused unread, and run.json past MAX_RUN_JSON."""
    try:
        entries = list(os.scandir(d))
    except OSError as e:
        return f"cannot be listed ({type(e).__name__}: {e})"
    for e in entries:
        try:
            st = os.stat(e.path)
        except OSError:
            continue   # a dangling link: Run.load says the table is missing
        if stat.S_ISDIR(st.st_mode):
            continue
        if not stat.S_ISREG(st.st_mode):
            return (f"{e.name} is not a regular file (a pipe, device or socket); it is not "
                    "read. Replace it with the saved file, or remove this folder")
        if e.name == "run.json" and st.st_size > MAX_RUN_JSON:
            return (f"run.json is {st.st_size / 2**20:.0f} MB, over the "
                    f"{MAX_RUN_JSON >> 20} MB a run description can be; it is not read")
    return ""
