"""Run history: on the client and on disk, never only on the engines (an engine stuck in a
collective can only be restarted). Each run is saved as it completes, failed ones too."""
from __future__ import annotations

from pathlib import Path

from .run import Run


class History:
    def __init__(self, folder=None):
        self.folder = Path(folder) if folder is not None else None
        self.runs: list[Run] = []

    def add(self, run: Run) -> Run:
        self.runs.append(run)
        if self.folder is not None:
            run.save(self.folder / f"{len(self.runs) - 1:04d}-{run.run_id}")
        return run

    @classmethod
    def load(cls, folder) -> "History":
        """Every complete run in the folder (a run.json marks one complete), in order."""
        h = cls(folder)
        folder = Path(folder)
        if folder.exists():
            for d in sorted(p for p in folder.iterdir() if (p / "run.json").exists()):
                h.runs.append(Run.load(d))
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
        """One row per run: id, status, the config fields that vary, median step ms."""
        import pandas as pd
        rows = []
        for r in self.runs:
            row = dict(run=r.run_id, status=r.status, label=r.label)
            s = r.summary
            if len(s) and "step_ms" in s:
                row["step_ms (max rank)"] = float(s["step_ms"].max())
            if len(s) and "recompiles" in s:
                row["recompiles"] = int(s["recompiles"].max())
            rows.append(row)
        return pd.DataFrame(rows)

    def __repr__(self):
        return f"<History {len(self.runs)} runs in {self.folder}>"

    def _repr_html_(self):
        return self.table().to_html(index=False)
