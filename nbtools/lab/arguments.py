"""lab: Lab(...) and lab.run(...) arguments checked before anything starts (ranks, time
limits, the history folder), each refusal a ConfigError that says what to give instead."""
from __future__ import annotations

import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from nbtools.config.step_config import ConfigError, StepConfig

# One local CPU engine is a Python process with torch imported, its gloo group, a scenario's
# model and the profiler's buffers: 387 MB resident measured (2 CPU ranks, a custom step,
# this 2-CPU box, torch 2.13 CPU); 0.5 GB leaves room for a built-in scenario's model. With
# spares (the default) each rank also has a warm spare engine of the same size.
# n engines that need more than the memory available now would swap or meet the OOM killer
# after minutes of starting (Lab(n=1000) asked for ~300 GB on a 24 GB box), so they are
# refused before the first process starts.
ENGINE_GB = 0.5
# Ranks per core: past 8 a rank gets under an eighth of a core, gloo's collectives wait on
# the scheduler and a step's time is mostly waiting; runs hit their timeout. Counted for
# local engines only: other launchers place engines on other hosts.
RANKS_PER_CORE = 8
# Lab(compile_cache_per=...): the ranks on a host share one inductor cache, or each has its own.
CACHE_PER = ("host", "rank")


def available_gb() -> float:
    """Memory a new process can get now (MemAvailable), else the machine's total."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return math.inf


def check_n(n, local: bool, spares: bool = True):
    """None (one per GPU, or 2 CPU ranks) or a whole number of ranks this machine can hold."""
    if n is None:
        return None
    if isinstance(n, bool) or not hasattr(n, "__index__"):
        raise ConfigError(f"Lab(n={n!r}): n is the number of ranks, a whole number >= 1 "
                          f"(got a {type(n).__name__}); e.g. Lab(n=2), or leave it out for one "
                          "rank per GPU (2 CPU ranks without GPUs)")
    n = int(n)
    if n < 1:
        raise ConfigError(f"Lab(n={n}): give at least 1 rank (Lab(n=2)), or leave n out for "
                          "one rank per GPU (2 CPU ranks without GPUs)")
    if local:
        cores = os.cpu_count() or 1
        per_rank = ENGINE_GB * (2 if spares else 1)
        by_mem, by_cores = int(available_gb() // per_rank), RANKS_PER_CORE * cores
        most = max(min(by_mem, by_cores), 0)   # the one limit that holds, never the looser
        if n > by_mem:
            raise ConfigError(
                f"Lab(n={n}): {n} local ranks need about {n * per_rank:.0f} GB "
                f"({per_rank} GB each{', with its spare' if spares else ''}) but "
                f"{available_gb():.1f} GB is available; this machine holds at most "
                f"{most}. Use a smaller n (or spares=False), or engines='slurm'/"
                "'mpi' to spread ranks over hosts.")
        if n > by_cores:
            raise ConfigError(
                f"Lab(n={n}): {n} ranks on {cores} CPU core(s) is over {RANKS_PER_CORE} per "
                "core; each rank would wait on the others for the CPU and runs would time "
                f"out. Use n <= {most}, or another launcher (engines=...).")
    return n


def check_seconds(name: str, value, allow_none: bool = False):
    """A time limit: a finite number of seconds > 0 (None: the default, where allowed)."""
    if value is None and allow_none:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        what = "not a number" if not ok else "not finite" if value == value and not \
            math.isfinite(value) else "NaN" if value != value else "not above 0"
        default = " (or leave it out for the lab's)" if allow_none else ""
        raise ConfigError(f"{name}={value!r}: {what}; give a number of seconds > 0, e.g. "
                          f"{name}=600{default}")
    return float(value)


def check_run_args(fn_or_cfg, cfg) -> None:
    """lab.run takes one config: a second StepConfig in place of the first's changes was
    dropped silently (lab.run(cfg_a, cfg_b) ran cfg_a only)."""
    if isinstance(fn_or_cfg, StepConfig) and cfg is not None:
        raise ConfigError("lab.run(cfg_a, cfg_b): lab.run runs one config. Compare two with "
                          "lab.ab(cfg_a, cfg_b), or run each: lab.run(cfg_a); lab.run(cfg_b)")


def check_history(folder):
    """The history folder, created and written to once before any engine starts, so a run
    is never finished with nowhere to go (it was: a raw FileNotFoundError after the run)."""
    if not folder:
        return None
    p = Path(folder).expanduser()
    if p.exists() and not p.is_dir():
        raise ConfigError(f"Lab(history={str(folder)!r}) is a file; give a folder for the "
                          "runs (it is created), or history=None to keep runs in memory only")
    try:
        p.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p, prefix=".nbtools-write-check-"):
            pass
    except OSError as e:
        raise ConfigError(f"Lab(history={str(folder)!r}) cannot be written ({e.strerror or e}); "
                          "give a writable folder, or history=None to keep runs in memory "
                          "only") from None
    return folder


def check_cache_per(per: str) -> str:
    """``compile_cache_per`` if it is "host" or "rank", else ConfigError saying what each means."""
    if per not in CACHE_PER:
        raise ConfigError(f"compile_cache_per={per!r}: give one of {', '.join(CACHE_PER)} "
                          "(host: the ranks on a host share one inductor cache; rank: each "
                          "rank its own, so every rank compiles cold)")
    return per


def rank_cache(root: Path, p, per: str) -> Path:
    """A rank's inductor cache folder: one per host (the ranks there build each kernel
    once: inductor compiles under a file lock keyed by the kernel's source, and the other
    ranks load what the first built) or one per rank."""
    if per == "rank":
        return root / f"rank{p.rank}"
    return root / ("host-" + re.sub(r"[^A-Za-z0-9._-]", "_", str(p.host)))


# The default of Lab(compile_cache=...) where set: every lab without a folder of its own
# keeps its inductor caches there, so a restarted kernel, a second CLI run or a test suite's
# next lab compiles warm instead of from nothing.
COMPILE_CACHE_ENV = "NBTOOLS_COMPILE_CACHE"


def cache_folder(path) -> Path | None:
    """Lab(compile_cache=...): a folder made now (one subfolder per host or rank later), or a clear
    error for a file or a place that cannot be written. ``None`` takes $NBTOOLS_COMPILE_CACHE
    where it is set (not empty), else stays None: the lab's own cold cache."""
    given = f"compile_cache={str(path)!r}"
    if path is None:
        path = os.environ.get(COMPILE_CACHE_ENV) or None
        if path is None:
            return None
        given = f"${COMPILE_CACHE_ENV}={path!r} (the default of compile_cache)"
    folder = Path(path).expanduser().resolve()
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{given} is a file; give a folder (it gets one subfolder per host "
                          "or rank)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{given} cannot be created ({e}); give a writable folder") from None
    return folder


def check_engines(engines) -> None:
    """Lab(engines=...): "local", a name of an ipyparallel engine launcher (its entry
    points: mpi, slurm, ssh, ...), a launcher class, or hosts (SSH(...) or a dict). A wrong
    name was a TraitError from inside ipyparallel after the Lab had begun."""
    if isinstance(engines, str):
        if engines.lower() in ("local", *_launcher_names()) or _importable(engines):
            return
        names = ", ".join(_launcher_names())
        raise ConfigError(f"Lab(engines={engines!r}): not an ipyparallel engine launcher; "
                          f"give one of {names}, a "
                          "launcher class, or hosts: engines={'node1': 4, 'node2': 4}")
    from nbtools.lab.hosts import wanted
    if isinstance(engines, type) or wanted(engines):
        return
    raise ConfigError(f"Lab(engines={engines!r}): give a launcher's name (engines='local', "
                      "'mpi', 'slurm', ...), a launcher class, or hosts: engines={'node1': 4}")


def _importable(name: str) -> bool:
    """A launcher class by its import path ("mypkg.launchers.MyEngineSetLauncher"), which
    ipyparallel takes as well as the short names."""
    import importlib
    module, _, attr = name.rpartition(".")
    try:
        return bool(module) and isinstance(getattr(importlib.import_module(module), attr), type)
    except (ImportError, AttributeError, ValueError):
        return False


def _launcher_names() -> list:
    from ipyparallel.traitlets import entry_points
    return sorted({e.name.lower() for e in entry_points(group="ipyparallel.engine_launchers")})


def check_cluster(cluster) -> None:
    """Lab(cluster=...): an ipyparallel Client, or a Cluster whose controller runs. Anything
    else failed inside ipyparallel (an AttributeError on connect_client_sync)."""
    if cluster is None:
        return
    import ipyparallel as ipp
    if isinstance(cluster, ipp.Client):
        return
    if not isinstance(cluster, ipp.Cluster):
        raise ConfigError(f"Lab(cluster=<{type(cluster).__name__}>): give a started "
                          "ipyparallel Cluster or a Client (c = ipp.Cluster(n=2); "
                          "c.start_cluster_sync(); Lab(cluster=c)), or leave cluster out and "
                          "let the Lab start engines: Lab(n=2)")
    if cluster.controller is None:
        raise ConfigError("Lab(cluster=...): this ipyparallel Cluster has not been started; "
                          "call cluster.start_cluster_sync() first (or leave cluster out: "
                          "Lab(n=2) starts its own)")


@dataclass(frozen=True)
class Checked:
    """A run Lab.check accepted: the step or Workload (None: a built-in scenario), the
    config, and the device type the engines had when it was checked."""
    fn: Optional[Callable]
    cfg: StepConfig
    device_type: str


def resolve_run(lab, r, name: str = "run"):
    """A Run, or a run id looked up in lab.history; else ConfigError saying what to give."""
    from nbtools.results.run import Run
    if isinstance(r, Run):
        return r
    if not isinstance(r, str):
        raise ConfigError(f"{name}={r!r}: give a Run or a run id from lab.history "
                          "(e.g. lab.history[-1] or its run_id)")
    return lab.history[r]
