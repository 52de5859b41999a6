"""Run: one result across ranks. Plain tables plus the config and environment that made
them; saved to and loaded from a folder so history outlives the kernel."""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pandas as pd

from . import tables
from .config import StepConfig


@dataclass
class Run:
    config: Optional[StepConfig]
    steps: pd.DataFrame = field(default_factory=lambda: tables.empty(tables.STEP_COLUMNS))
    events: pd.DataFrame = field(default_factory=lambda: tables.empty(tables.EVENT_COLUMNS))
    compile_events: pd.DataFrame = field(default_factory=lambda: tables.empty(tables.COMPILE_COLUMNS))
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    reports: pd.DataFrame = field(default_factory=pd.DataFrame)
    """What a custom step recorded with ctx.report(): rank, step, then its own columns."""
    env: dict = field(default_factory=dict)
    """Versions, devices, hosts, world size: what a colleague needs to reproduce it."""
    status: str = "ok"
    """ok | failed"""
    errors: dict = field(default_factory=dict)
    """rank -> error text, for failed ranks (and ranks that did not finish)."""
    flags: list = field(default_factory=list)
    """Things the reader must not miss: divergent ranks, unused fields, 0 graphs compiled."""
    ranks: dict = field(default_factory=dict)
    """rank -> what that engine reported beside the tables (peak memory, check, ...)."""
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    started: float = field(default_factory=time.time)
    source: str = "lab"
    """lab | traces (made by load_traces)"""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def label(self) -> str:
        head = self.config.label() if self.config is not None else self.source
        return f"#{self.run_id} {head}" + ("" if self.ok else " [failed]")

    @property
    def world_size(self) -> int:
        return int(self.env.get("world_size", len(self.ranks) or self.events["rank"].nunique()))

    def __repr__(self) -> str:
        return f"<Run {self.label}: {len(self.events)} events, {len(self.compile_events)} compile events>"

    def _repr_html_(self) -> str:
        head = f"<b>{self.label}</b>"
        if self.flags:
            head += "<ul>" + "".join(f"<li>{_esc(f)}</li>" for f in self.flags) + "</ul>"
        if self.errors:
            head += "<ul>" + "".join(f"<li>rank {r}: {_esc(e.splitlines()[0] if e else '')}</li>"
                                     for r, e in sorted(self.errors.items())) + "</ul>"
        from .summary_view import summary_table
        return head + summary_table(self.summary)

    # -- figures (built by the plotting module; imported lazily so analysis stays bokeh-free)
    def plot(self, **kw):
        """The per-rank timeline: a live widget in Jupyter, ``.layout`` for Bokeh."""
        from .display import Figure
        from .timeline import Timeline
        tl = Timeline(self, **kw)
        return Figure(tl.layout, tl)

    # -- persistence ---------------------------------------------------------------------
    def save(self, folder) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("steps", "events", "compile_events", "summary"):
            df = getattr(self, name)
            df.to_parquet(folder / f"{name}.parquet", index=False)
        if len(self.reports):
            _parquet_safe(self.reports).to_parquet(folder / "reports.parquet", index=False)
        meta = dict(config=self.config.to_dict() if self.config else None, env=self.env,
                    status=self.status, errors={str(k): v for k, v in self.errors.items()},
                    flags=list(self.flags), ranks={str(k): v for k, v in self.ranks.items()},
                    run_id=self.run_id, started=self.started, source=self.source)
        tmp = folder / "run.json.tmp"
        tmp.write_text(json.dumps(meta, indent=1, default=_jsonable))
        tmp.replace(folder / "run.json")     # run.json last: its presence means complete
        return folder

    @classmethod
    def load(cls, folder) -> "Run":
        folder = Path(folder)
        meta = json.loads((folder / "run.json").read_text())
        cfg = StepConfig.from_dict(meta["config"]) if meta.get("config") else None
        frames = {}
        for name, cols in (("steps", tables.STEP_COLUMNS), ("events", tables.EVENT_COLUMNS),
                           ("compile_events", tables.COMPILE_COLUMNS), ("summary", None)):
            p = folder / f"{name}.parquet"
            df = pd.read_parquet(p) if p.exists() else pd.DataFrame()
            if cols is not None:
                df = tables.concat([df], cols) if len(df) else tables.empty(cols)
            frames[name] = df
        p = folder / "reports.parquet"
        frames["reports"] = pd.read_parquet(p) if p.exists() else pd.DataFrame()
        return cls(config=cfg, env=meta.get("env", {}), status=meta.get("status", "ok"),
                   errors={int(k): v for k, v in meta.get("errors", {}).items()},
                   flags=meta.get("flags", []),
                   ranks={int(k): v for k, v in meta.get("ranks", {}).items()},
                   run_id=meta["run_id"], started=meta.get("started", 0.0),
                   source=meta.get("source", "lab"), **frames)


def _jsonable(o):
    try:
        import numpy as np
        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    return str(o)


def _esc(s: str) -> str:
    import html
    return html.escape(str(s))


def _parquet_safe(df: pd.DataFrame) -> pd.DataFrame:
    """A user's report column may mix types (a number on one step, None or text on
    another); Parquet needs one type per column, so such columns are kept as text."""
    out = df.copy()
    for c in out.columns[out.dtypes == object]:
        kinds = {type(v) for v in out[c] if v is not None}
        if len(kinds) > 1:
            out[c] = [None if v is None else str(v) for v in out[c]]
    return out
