"""Run history: on the client and on disk, never only on the engines (an engine stuck in a
collective can only be restarted). Each run is saved as it completes, failed ones too.

One damaged run folder never costs the others: ``History.load`` lists it in ``damaged``
with the reason and loads every other run; a run missing a table loads with that table
empty and a ``damaged: ...`` flag. Folder numbers are claimed atomically, so two writers
(two notebooks, a notebook and the CLI) on one folder never share a number."""
from __future__ import annotations

import os
import re
from pathlib import Path

from nbtools.analysis.metrics import HISTORY, combine, is_count
from nbtools.results.run import Run

_NUMBERED = re.compile(r"^(\d{4,})-")
_CLAIMS = ".numbers"   # one empty file per claimed number (created with O_EXCL)


class History:
    def __init__(self, folder=None):
        self.folder = Path(folder) if folder is not None else None
        self.runs: list[Run] = []
        self.damaged: list[tuple[str, str]] = []
        """(folder name, why) for each run folder that could not be loaded at all."""

    def add(self, run: Run) -> Run:
        self.runs.append(run)
        if self.folder is not None:
            run.save(self._claim(run.run_id))
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
    def load(cls, folder) -> "History":
        """Every run in the folder, in order. A folder that cannot be loaded (no or damaged
        run.json) goes to ``damaged`` with the reason; the others load."""
        h = cls(folder)
        folder = Path(folder)
        if not folder.is_dir():
            return h
        for d in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if not (d / "run.json").exists():
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
        if isinstance(key, str):   # by run id
            for r in self.runs:
                if r.run_id == key:
                    return r
            raise KeyError(f"no run with id {key!r}; ids: {[r.run_id for r in self.runs]}")
        return self.runs[key]

    def __len__(self):
        return len(self.runs)

    def __iter__(self):
        return iter(self.runs)

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
        return self.table().to_html(index=False)
