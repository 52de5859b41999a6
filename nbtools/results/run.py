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

from nbtools.analysis import samples as signal_samples
from nbtools.schema import tables
from nbtools.schema.signals import SAMPLE_COLUMNS
from nbtools.common.atomic import atomic_folder
from nbtools.config.step_config import ConfigError, StepConfig
from nbtools.results import odd_values, torch_trace
from nbtools.results.errors import root_cause
from nbtools.results.views import view


@dataclass
class Run:
    """One run of one config on every rank: plain tables (all ranks in each), the config and
    the environment that made them. ``lab.run`` returns it, ``load_traces`` makes one from
    any PyTorch job's Kineto traces, ``Run.load`` reads a saved one.

    Example:
        >>> run = lab.run(StepConfig(compile="default"))
        >>> run.summary[["rank", "step_ms", "recompiles"]]     # one row per rank
        >>> run.compile_events.query("kind == 'recompile'")[["rank", "reason"]]
        >>> run.plot()                                         # every rank's timeline
        >>> run.to_perfetto("run.json")
    """
    config: Optional[StepConfig]
    """What ran (None for traces loaded from another job)."""
    steps: pd.DataFrame = field(default_factory=lambda: tables.empty(tables.STEP_COLUMNS))
    """Every warm-up and measured step of every rank: rank, step, phase, ts_ns, dur_ns."""
    events: pd.DataFrame = field(default_factory=lambda: tables.empty(tables.EVENT_COLUMNS))
    """The profiled steps' timeline, one row per event (docs/design.md, "Event schema")."""
    compile_events: pd.DataFrame = field(default_factory=lambda: tables.empty(tables.COMPILE_COLUMNS))
    """Compiles, recompiles (with reason), graph breaks, CUDA-graph skips: rank, kind, ..."""
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    """One row per rank: step_ms (median, p10, p90), compute_busy, exposed_comm, recompiles, ..."""
    memory: pd.DataFrame = field(default_factory=pd.DataFrame)
    """StepConfig(memory=True): rank, ts_ns, allocated, reserved, graph_pool (bytes)."""
    samples: pd.DataFrame = field(default_factory=signal_samples.empty, repr=False)
    """The machine's signals through the run: rank, ts_ns (the events' clock), signal, value
    (schema/signals.py SIGNALS: GPU utilisation, SM clock, power, ... on GPUs; the
    process's CPU and memory and the host's load everywhere). Empty for traces of another
    job and for runs with sampling off."""
    event_details: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    """rank, ts_ns, name, detail: input shapes, bytes, process group of profiled events."""
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
    """Eight hex digits: ``lab.history[run_id]`` finds it."""
    started: float = field(default_factory=time.time)
    """When it started (seconds since the epoch)."""
    source: str = "lab"
    """lab | traces (made by load_traces)"""
    torch_trace_logs: dict = field(default_factory=dict, repr=False)
    """rank -> {file name: bytes}: TORCH_TRACE logs brought back, until saved to a folder."""
    folder: Optional[Path] = field(default=None, repr=False)
    """Where the run was saved (or loaded from); None while it lives only in memory."""

    @property
    def ok(self) -> bool:
        """True unless a rank failed or did not finish (``errors`` says why)."""
        return self.status == "ok"

    @property
    def title(self) -> str:
        """The config's label, named after the Workload or step function that ran (its
        ``name``, kept in env["workload"]) rather than scenario 'custom'."""
        if self.config is None:
            return self.source
        head, name = self.config.label(), self.env.get("workload")
        if name and self.config.scenario == "custom" and head.startswith("custom"):
            head = name + head[len("custom"):]
        return head

    @property
    def label(self) -> str:
        """``#run_id title``, marked [failed] when it failed: how lists and legends name it."""
        return f"#{self.run_id} {self.title}" + ("" if self.ok else " [failed]")

    @property
    def torch_trace(self) -> list:
        """The TORCH_TRACE log files of a run with torch_trace=True (RUN/torch_trace/rankN/);
        tlparse's report of them, when tlparse is installed: RUN/torch_trace/tlparse/."""
        return torch_trace.logs(self)

    @property
    def world_size(self) -> int:
        """How many ranks ran it."""
        return int(self.env.get("world_size", len(self.ranks) or self.events["rank"].nunique()))

    def __repr__(self) -> str:
        return f"<Run {self.label}: {len(self.events)} events, {len(self.compile_events)} compile events>"

    def _repr_html_(self) -> str:
        return view("run.html")(self)

    def first_error(self) -> str:
        """Why it failed, the root cause first: the error of the lowest rank that failed on
        its own (not because a peer did), and which ranks stopped with it; '' when none did."""
        return root_cause(self.errors)

    @property
    def compiled_by(self) -> Optional[str]:
        """The id of the run that compiled the graphs this one ran (it compiled none on
        any rank, and that run's compile events hold the recompiles and graph breaks), or
        None when this run compiled its own."""
        ids = {m.get("built_by") for m in self.ranks.values() if isinstance(m, dict)}
        if len(ids) == 1:
            (built_by,) = ids
            return built_by if built_by and built_by != self.run_id else None
        return None

    def why(self):
        """Why each rank's step takes its time, before anything is proposed: how much of the
        profiled step the GPU waited and why (host wait, kernel wait, other: as
        HolisticTraceAnalysis splits it), where the host was while the GPU waited for it
        (the optimizer, FSDP/DDP hooks, autograd, the forward's Python, the batch, syncs,
        launches), the kernels' size and how much the profiler stretched the step. A CPU
        rank, with no GPU to wait for, says where its profiled step went by the same causes
        (forward, autograd's backward, the optimizer, hooks and collectives, compiled
        graphs). One Diagnosis per rank (nbtools.analysis.advice.diagnosis); and ``.gpu``,
        per GPU rank, what its kernels computed: time by kind of work (matrix products and
        convolutions by dtype, attention, elementwise, copies, communication), the top
        kernels, SM / tensor-core / DRAM activity (NVML GPM) and the card's own numbers
        (analysis/gpu_reading.py). Prints as sentences."""
        from nbtools.analysis.advice.diagnosis import Why, diagnose
        from nbtools.analysis.gpu_reading import readings
        return Why(diagnose(self, cpu_split=True), readings(self))

    def kernels(self, top: int = 0):
        """What the GPU computed in the profiled steps, per rank: ms a step, kernels a step and
        share of the GPU's kernel time by kind of work (matmul, conv, attention, elementwise,
        memory, comm, other) and dtype as the kernels' names say it ('?' where they do not);
        ``top=n``: the n kernels that took the most time instead (nbtools.analysis.kernels).
        Empty on CPU ranks."""
        from nbtools.analysis.kernels import kernel_split, top_kernels
        return top_kernels(self.events, top) if top else kernel_split(self.events)

    def advise(self, compiled_by: Optional["Run"] = None):
        """What this run's tables say to try, best first (nbtools.analysis.advice): each a
        Suggestion with change (StepConfig fields, {} when the fix is in your code),
        evidence (this run's numbers), why, code and cost. Empty: nothing found.
        ``compiled_by``: the Run of ``self.compiled_by`` (lab.advise finds it in the
        history), whose compile-time findings are added."""
        from nbtools.analysis.advice import advise
        return advise(self, compiled_by)

    def plot(self, **kw):
        """Every rank's CUDA streams, CPU ops and compile events on one clock.

        Args:
            **kw: passed to the timeline (nbtools.ui.timeline.run_figure), e.g.
                ``ranks=[0, 1]``.

        Returns:
            Figure: displays as a live widget in Jupyter; ``.layout`` is the Bokeh layout,
            ``.save(path)`` writes it as standalone HTML.

        Example:
            >>> run.plot()                       # the last expression of a cell shows it
            >>> run.plot().save("timeline.html")
        """
        return view("run.plot")(self, **kw)

    def to_perfetto(self, path, force: bool = False) -> Path:
        """One Chrome-trace JSON (``.json``, or ``.json.gz``) of every rank (a process each),
        its steps, compile events and flows between matched collectives. Open it at
        https://ui.perfetto.dev (Open trace file; the file stays in the browser) or
        chrome://tracing; ``nbtools.load_traces`` and HTA read ``results.trace_export.write_kineto``'s
        per-rank files. It never replaces a notebook, a saved run's file or a profiler
        trace unless ``force=True`` (FileExistsError saying which)."""
        from nbtools.results.trace_export import write_perfetto
        return write_perfetto(self, path, force=force)

    # -- persistence ---------------------------------------------------------------------
    def save(self, folder) -> Path:
        """Write the tables (Parquet) and run.json into ``folder``, whole or not at all: into
        a hidden folder beside it, renamed to ``folder`` at the end (common.atomic), so a
        full disk or a Ctrl-C part-way leaves no half-saved run. ``folder`` may be new,
        empty or this run saved before; a folder holding anything else (another run, your
        files) is refused (FileExistsError). An OSError is a WriteFailed naming
        ``folder``. Returns it."""
        folder = Path(folder)
        meta = dict(config=self.config.to_dict() if self.config else None, env=self.env,
                    status=self.status, errors={str(k): v for k, v in self.errors.items()},
                    flags=list(self.flags), ranks={str(k): v for k, v in self.ranks.items()},
                    run_id=self.run_id, started=self.started, source=self.source)
        with atomic_folder(folder, replaceable=self._saved_in,
                           foreign="holds other files (another run, or not a run)") as tmp:
            for name in ("steps", "events", "compile_events", "summary"):
                getattr(self, name).to_parquet(tmp / f"{name}.parquet", index=False)
            if len(self.reports):
                _parquet_safe(self.reports).to_parquet(tmp / "reports.parquet", index=False)
            for name in ("memory", "event_details", "samples"):
                if len(getattr(self, name)):
                    getattr(self, name).to_parquet(tmp / f"{name}.parquet", index=False)
            trace_flags = torch_trace.save(self, tmp)      # before run.json: it may add a flag
            meta["flags"] = list(self.flags) + [f for f in trace_flags if f not in self.flags]
            (tmp / "run.json").write_text(strict_json(meta))
        torch_trace.committed(self, trace_flags)
        self.folder = folder
        return folder

    def _saved_in(self, folder: Path) -> bool:
        """``folder`` holds this run, saved before (so saving it again replaces it)."""
        try:
            return _read_meta(folder / "run.json").get("run_id") == self.run_id
        except RunDamaged:
            return False

    @classmethod
    def load(cls, folder) -> "Run":
        """A saved run. A run.json that cannot be read is a RunDamaged naming the problem;
        a table that is missing or unreadable leaves that table empty and says so in
        ``flags`` (a partial run, never silently 0 events)."""
        folder = Path(folder)
        meta = _read_meta(folder / "run.json")
        flags = [str(f) for f in meta.get("flags", [])] if isinstance(meta.get("flags"), list) \
            else []
        cfg = None
        if meta.get("config"):
            try:
                cfg = StepConfig.from_dict(meta["config"])
            except ConfigError as e:   # saved by a version with other rules: keep the tables
                flags.append(f"damaged: run.json's config cannot be used today ({e}); the "
                             "run is shown without it")
        frames = {}
        for name, cols in (("steps", tables.STEP_COLUMNS), ("events", tables.EVENT_COLUMNS),
                           ("compile_events", tables.COMPILE_COLUMNS), ("summary", None)):
            frames[name], problem = _read_table(folder / f"{name}.parquet", cols, required=True)
            if problem:
                flags.append(f"damaged: {problem}")
        for name in ("reports", "memory", "event_details"):
            frames[name], problem = _read_table(folder / f"{name}.parquet", None, required=False)
            if problem:
                flags.append(f"damaged: {problem}")
        frames["samples"], problem = _read_table(folder / "samples.parquet",
                                                 SAMPLE_COLUMNS, required=False)
        if problem:
            flags.append(f"damaged: {problem}")
        elif not len(frames["samples"]):   # saved before samples.parquet: run.json kept a few
            bad: list = []
            frames["samples"] = signal_samples.from_machine_reports(_dict(meta, "ranks"), bad)
            if bad:   # the run's tables stand; only these ranks' signal lanes are lost
                flags.append(f"damaged: run.json's machine samples of rank(s) {', '.join(bad)} "
                             "cannot be read: their signal lanes are left out")
        status = str(meta.get("status", "ok"))
        # values no run writes: replaced, each said in a flag (results/odd_values.py)
        frames["summary"] = odd_values.check_summary(frames["summary"], status == "ok", flags)
        started = odd_values.check_started(meta.get("started"), flags)
        env = odd_values.check_env(_dict(meta, "env"), flags)
        try:
            return cls(config=cfg, env=env, status=status,
                       errors={int(k): v for k, v in _dict(meta, "errors").items()},
                       flags=flags, ranks={int(k): v for k, v in _dict(meta, "ranks").items()},
                       run_id=str(meta["run_id"]), started=started,
                       source=str(meta.get("source", "lab")), folder=folder, **frames)
        except (KeyError, TypeError, ValueError) as e:
            raise RunDamaged(f"{folder / 'run.json'}: {type(e).__name__} {e} (a field has the "
                             "wrong type, or run_id is missing)") from None

    @property
    def damage(self) -> list:
        """What could not be loaded from disk (empty for a whole run)."""
        return [f for f in self.flags if str(f).startswith("damaged: ")]


class RunDamaged(ValueError):
    """A saved run folder that cannot be loaded; the message names the file and why."""


def strict_json(meta: dict) -> str:
    """run.json text that any JSON reader accepts: NaN and ±inf are written as null and
    their places listed under "nonfinite", so loading puts them back."""
    places = []
    clean = _finite(meta, [], places)
    if places:
        clean["nonfinite"] = places
    return json.dumps(clean, indent=1, allow_nan=False)


def _finite(o, path: list, places: list):
    import math
    import numpy as np
    if isinstance(o, np.generic):
        o = o.item()
    elif isinstance(o, np.ndarray):
        o = o.tolist()
    if isinstance(o, float) and not math.isfinite(o):
        places.append([*path, repr(o)])   # 'nan', 'inf', '-inf': float() reads them back
        return None
    if isinstance(o, dict):
        return {str(k): _finite(v, [*path, str(k)], places) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v, [*path, i], places) for i, v in enumerate(o)]
    if o is None or isinstance(o, (str, int, float, bool)):
        return o
    return _jsonable(o)


def _read_meta(p: Path) -> dict:
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise RunDamaged(f"{p}: cannot be read ({type(e).__name__}: {e})") from None
    if not text.strip():
        raise RunDamaged(f"{p}: is empty (the run was cut off while saving)")
    try:
        meta = json.loads(text)
    except ValueError as e:
        raise RunDamaged(f"{p}: is not valid JSON ({e})") from None
    if not isinstance(meta, dict):
        raise RunDamaged(f"{p}: holds a {type(meta).__name__}, not a run's description")
    for place in meta.pop("nonfinite", None) or []:
        try:   # a place is [key, key/index..., 'nan'|'inf'|'-inf']
            *keys, value = place
            target = meta
            for k in keys[:-1]:
                target = target[k]
            target[keys[-1]] = float(value)
        except (ValueError, TypeError, KeyError, IndexError):
            pass   # a damaged place list loses one NaN, not the run
    return meta


def _dict(meta: dict, key: str) -> dict:
    v = meta.get(key)
    return v if isinstance(v, dict) else {}


def _read_table(p: Path, cols, required: bool):
    """(table, None) or (empty table, what is wrong with it)."""
    empty = tables.empty(cols) if cols is not None else pd.DataFrame()
    if not p.exists():
        return empty, (f"{p.name} is missing: this run's {p.stem} are lost" if required else None)
    if not p.is_file():
        return empty, f"{p.name} is not a file: this run's {p.stem} are lost"
    try:
        df = pd.read_parquet(p)
    except Exception as e:  # noqa: BLE001 - pyarrow raises many kinds for a damaged file
        return empty, f"{p.name} cannot be read ({type(e).__name__}: {str(e)[:120]})"
    if cols is None:
        if p.stem == "summary" and len(df) and "rank" not in df:
            return empty, f"{p.name} has no rank column: not a run summary"
        return df, None
    missing = [c for c in cols if c not in df]
    if missing:
        return empty, f"{p.name} lacks the column(s) {', '.join(missing)}"
    try:
        return (tables.concat([df], cols) if len(df) else empty), None
    except (TypeError, ValueError) as e:
        return empty, f"{p.name} has a column of the wrong type ({e})"


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


def _parquet_safe(df: pd.DataFrame) -> pd.DataFrame:
    """A user's report column may mix types (a number on one step, None or text on
    another); Parquet needs one type per column, so such columns are kept as text."""
    out = df.copy()
    for c in out.columns[out.dtypes == object]:
        kinds = {type(v) for v in out[c] if v is not None}
        if len(kinds) > 1:
            out[c] = [None if v is None else str(v) for v in out[c]]
    return out
