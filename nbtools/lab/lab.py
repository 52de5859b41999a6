"""Lab: ipyparallel engines, one per GPU (or n CPU ranks on gloo), joined in one
torch.distributed job that stays up while the notebook toggles configs."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable, Optional

from nbtools.engine import process_group, runner as engine
from nbtools.lab import gather, hosts, placement, preload as preloading
from nbtools.lab.assemble import assemble, first_error
from nbtools.lab import arguments, reaper
from nbtools.lab.arguments import Checked
from nbtools.lab import recovery
from nbtools.analysis import machine
from nbtools.config.step_config import ConfigError, StepConfig
from nbtools.results.history import History
from nbtools.lab.pool import Pool
from nbtools.results.run import Run
from nbtools.lab.errors import LabClosed, RunFailed, RunTimeout  # noqa: F401  (users catch them here)
from nbtools.config.workload import Workload, check_run, to_payload
from nbtools.results.comparison import Comparison
from nbtools.lab import ab as ab_rounds
from nbtools.results.views import view


class Lab:
    """One engine per visible GPU; without GPUs, ``n`` CPU ranks (default 2) on gloo.

    ``timeout`` bounds a run; ``pg_timeout`` is torch.distributed's collective timeout;
    ``peer_grace`` is how long other ranks may still run after one rank failed before the
    lab treats them as stuck in a collective and restarts the engines.
    ``engines`` is any ipyparallel launcher name ("local", "mpi", "slurm", "ssh", ...);
    ``cluster`` an existing ipyparallel Cluster or Client to use instead of starting one.
    ``history`` is the folder runs are saved to as they complete.
    ``spares`` keeps a warm engine per rank (started in the background, torch imported;
    two where the host has the cores and memory, for faults back to back) that replaces a
    dead, hung or interrupted rank's engine in about a second; without it
    a replacement is started when needed (as slow as a start). Local engines only.
    ``compile_cache``: a folder for the ranks' inductor caches that outlives the lab (a
    later lab given it starts warm, as a max-autotune experiment needs); default a new one
    per lab. ``compile_cache_per``: "host" (default) gives a host's ranks one folder
    (inductor builds each kernel under a file lock keyed by its source, so the others load
    what one builds); "rank" one each (``DIR/rank0``, ...), for cold compiles per rank.
    ``progress``: while a run runs, show each rank's phase (start, warm-up/compile,
    measured, profiled, parse) and step — a widget in Jupyter, lines on stderr elsewhere;
    False for none, or a callable that gets the text (the panel's status line).
    ``engine_warnings``: the last run's library warnings per rank, in full (under the run
    they are folded to one line per kind with a count). "host busy" is said once per lab:
    when it starts, where its ranks have more threads than the cores they share (``notes``),
    else by the first run that finds the host busy (``said_once``; every run keeps its
    host_load). ``preload``: engines import a Workload's modules in the background as soon
    as the lab sees it (lab/preload.py); ``lab.preloads()`` says what, and how long it took.
    """
    progress = True
    closed = False

    def __init__(self, n: Optional[int] = None, engines: str = "local", cluster=None,
                 history="nbtools-runs", timeout: float = 600.0, pg_timeout: float = 300.0,
                 echo: bool = True, start_timeout: float = 120.0, peer_grace: float = 5.0,
                 compile_cache=None, spares: bool = True, compile_cache_per: str = "host",
                 preload: bool = True):
        self._preloader = preloading.for_lab(self, preload)     # checked before anything starts
        arguments.check_cluster(cluster)
        if cluster is None:
            arguments.check_engines(engines)
        n, history = arguments.check_n(n, engines == "local" and cluster is None, spares), \
            arguments.check_history(history)
        timeout, pg_timeout, start_timeout = (arguments.check_seconds(k, v) for k, v in (
            ("timeout", timeout), ("pg_timeout", pg_timeout), ("start_timeout", start_timeout)))
        self.engines, self.timeout, self.pg_timeout, self.echo = engines, timeout, pg_timeout, echo
        self.peer_grace = peer_grace
        self.start_timeout = start_timeout
        self._external = cluster
        self.history = History.load(history) if history else History(None)
        self.compile_cache = arguments.cache_folder(compile_cache)
        self.compile_cache_per = arguments.check_cache_per(compile_cache_per)
        self.workdir = Path(tempfile.mkdtemp(prefix="nbtools-lab-"))
        self._guard = reaper.Guard()        # nothing the lab starts outlives this process
        self._guard.folder(self.workdir)
        self.spares, self.pool = spares, None
        self.hosts = None                   # engines on other hosts (lab/hosts.py)
        self._replace: set = set()          # ranks whose engines are swapped before the next run
        self._n_requested = n
        self.cluster = self.client = None
        self.placements: list = []
        self._pg_broken = False
        self.engine_warnings: dict = {}     # rank -> the last run's library warnings, in full
        self.notes: list = []               # what the lab said once (analysis.machine)
        self.said_once: set = set()         # ids of the once-per-lab flags said (host-busy)
        try:
            self._start()
        except BaseException:
            self._guard.close()     # a failed start takes its folders with it, at once
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise

    # -- lifecycle ---------------------------------------------------------------------
    def _start(self) -> None:
        import ipyparallel as ipp
        t0 = time.perf_counter()
        try:
            if self._external is not None:
                self.client = self._external if isinstance(self._external, ipp.Client) \
                    else self._external.connect_client_sync()
                self.cluster = None if isinstance(self._external, ipp.Client) else self._external
                ids = hosts.wait_external(self)
            else:
                ids = self._launch(ipp)
            self._join(ids)
            if len({p.host for p in self.placements}) > 1 or self._external is not None:
                print(hosts.summary(self.placements), file=sys.stderr)
            if self.pool is not None:
                self.pool.fill_spares(max(p.local_world for p in self.placements))
                self.pool.ready(self.client, self.start_timeout)
        except BaseException:
            if self._external is None:      # a failed start leaves no process behind
                self._stop(graceful=False)  # (an external cluster's engines are the user's)
            raise
        self.startup_s = time.perf_counter() - t0
        if self._preloader is not None:
            self._preloader.attach()

    def _launch(self, ipp) -> list:
        """Controller and engines on this lab's own profile folder (inside workdir, so the
        connection files and logs go with the lab); every process is told to the guard."""
        if hosts.wanted(self.engines):
            spec = self.engines if isinstance(self.engines, hosts.SSH) else hosts.SSH(self.engines)
            self.hosts = hosts.Hosts(self, spec)
            return self.hosts.launch(ipp)
        n, gpus = placement.count(self.engines, self._n_requested)
        from nbtools.lab.launchers import EngineSetLauncher, start_controller
        local = self.engines == "local"
        self.cluster = start_controller(ipp, EngineSetLauncher if local else self.engines,
                                        self.workdir, self._guard)
        if local:
            threads = placement.threads_per_rank(os.cpu_count(), n) if not gpus else 0
            self.pool = Pool(self.cluster, self._guard, gpus, threads, self.spares)
            slots = [self.pool.launch(i) for i in range(n)]
            self.pool.start_with(n)
        else:
            self.cluster.start_engines_sync(n=n)
            for es in self.cluster.engines.values():   # the launcher's local process (mpiexec, ...)
                if getattr(es, "pid", None):
                    self._guard.watch(es.pid)
        self.client = self.cluster.connect_client_sync()
        self.client.wait_for_engines(n, timeout=self.start_timeout, interactive=False)
        if self.pool is None:
            return sorted(self.client.ids)
        ids = [self.pool.await_engine(self.client, s, self.start_timeout) for s in slots]
        if None in ids:
            raise RuntimeError(f"{ids.count(None)} engine(s) did not register within "
                               f"start_timeout={self.start_timeout:.0f} s")
        return ids

    def _join(self, ids) -> None:
        """Ranks from what the engines report, then one process group over them. Also how
        a healed lab rejoins: survivors leave their old group inside engine.setup."""
        idents = self._on(ids, placement.identity)
        self.placements = placement.assign(dict(zip(ids, idents)))
        by_eid = {p.engine_id: p for p in self.placements}
        self._on(ids, placement.pin, args_for=lambda e: (by_eid[e].local_rank,))
        infos = self._on(ids, process_group.info)
        types = {i["device_type"] for i in infos}
        if len(types) != 1:
            raise RuntimeError(f"engines disagree on the device type: {types}; give every "
                               "engine a GPU or none")
        self.device_type = types.pop()
        self.infos = {by_eid[e].rank: i for e, i in zip(ids, infos)}
        self.rank_to_engine = {p.rank: p.engine_id for p in self.placements}
        r0 = self.rank_to_engine[0]
        addr = placement.master_addr(self.placements)
        # rank 0 opens the store's socket on exactly that address (loopback on one host)
        port = self.client[r0].apply_sync(process_group.listen, addr)
        world = len(self.placements)
        cpus = {p.rank: self.infos[p.rank]["cpus"] for p in self.placements}
        args = {p.engine_id: (p.rank, world, addr, port,
                              placement.threads_per_rank(cpus[p.rank], p.local_world)
                              if self.device_type == "cpu" else 0,
                              str(arguments.rank_cache(self.compile_cache or self.workdir
                                                       / "inductor-cache", p,
                                                       self.compile_cache_per)),
                              self.pg_timeout) for p in self.placements}
        self.setup_times = self._on(ids, process_group.setup, args_for=lambda e: args[e],
                                    timeout=self.start_timeout)
        self.world_size = world
        if self.device_type == "cpu":
            placement.say_oversubscribed(self, {p.engine_id: args[p.engine_id][4]
                                                for p in self.placements}, cpus)

    def _on(self, ids, fn, args_for=None, timeout=120.0) -> list:
        """Call fn on every engine at once (collectives need all ranks inside together)."""
        ars = [self.client[e].apply_async(fn, *(args_for(e) if args_for else ())) for e in ids]
        return [ar.get(timeout=timeout) for ar in ars]

    def restart(self) -> "Lab":
        """Fresh engines, all of them (after a fault the lab swaps in spares by itself; this
        is the full reset). History stays: it lives here and on disk."""
        self._stop(graceful=False)
        if self.closed:      # close() took the folder and the guard with it
            self.workdir.mkdir(parents=True, exist_ok=True)
            self._guard = reaper.Guard()
            self._guard.folder(self.workdir)
            self.closed = False
        self._pg_broken = False
        self._replace = set()
        self._start()
        return self

    @property
    def needs_restart(self) -> bool:
        """True when the next run will restart every engine: a rank failed beyond repair
        on engines this lab did not start (its own engines are swapped for spares)."""
        return bool(self._replace) and self.pool is None and self.hosts is None

    def close(self) -> None:
        self.closed = True
        if self._preloader is not None:
            self._preloader.detach()
        self._stop(graceful=True)
        # the guard removes the lab's folders: per-lab inductor caches (1.3 GB after one
        # max-autotune run on H200) and ipyparallel's profile; a compile_cache folder is
        # the user's and stays
        self._guard.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _stop(self, graceful: bool) -> None:
        """Every process this lab started goes at once (SIGKILL: there is nothing on an
        engine to save, and its exit frees sockets and GPU memory), so close() does not grow
        with the ranks as a graceful destroy of each rank's group did (20 s at 16 ranks).
        Engines of an external cluster are not ours: they leave the group and stay."""
        ext = self._external is not None
        if self.client is not None and ext and graceful and not self.needs_restart:
            try:
                ars = [self.client[e].apply_async(process_group.shutdown, 10.0)
                       for e in self.rank_to_engine.values()]
                for ar in ars:
                    ar.get(timeout=15)
            except Exception:
                pass
        elif self.client is not None and ext and not graceful:
            self.client.shutdown(hub=False, block=False)  # external engines: ask them to go
        if self.hosts is not None:
            self.hosts.stop()
        if not ext:
            reaper.kill(self._guard.pids)
            self._guard.pids.clear()
            if self.cluster is not None:
                try:
                    self.cluster.stop_cluster_sync()    # its processes are gone; its files
                except Exception:
                    pass
        if self.client is not None and not ext:
            self.client.close()
        self.client = self.pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- runs ----------------------------------------------------------------------------
    def check(self, fn_or_cfg=None, cfg: Optional[StepConfig] = None, **changes) -> "Checked":
        """What lab.run(...) with the same arguments would send, checked for these engines
        (their device, the Workload's or step's rules): the one client-side check, made
        before anything is dispatched. ConfigError when it cannot run here. A sweep checks
        every config first, then runs each as ``lab.run(checked)``, which checks nothing
        again."""
        if isinstance(fn_or_cfg, Checked):
            done = fn_or_cfg
            if cfg is not None:
                raise ConfigError("lab.run(checked) carries its config; give changes as "
                                  "keywords (lab.run(checked, batch=8))")
            if not changes and done.device_type == self.device_type:
                return done
            return self.check(done.fn, done.cfg, **changes) if done.fn is not None \
                else self.check(done.cfg, **changes)
        arguments.check_run_args(fn_or_cfg, cfg)
        fn: Optional[Callable] = None
        if isinstance(fn_or_cfg, Workload) or (callable(fn_or_cfg) and not isinstance(fn_or_cfg, StepConfig)):
            fn = fn_or_cfg
            cfg = cfg or StepConfig(scenario="custom")
            if cfg.scenario != "custom":
                cfg = cfg.replace(scenario="custom")
        else:
            cfg = fn_or_cfg if fn_or_cfg is not None else (cfg or StepConfig())
        if not isinstance(cfg, StepConfig):
            raise ConfigError(f"lab.run expects a StepConfig, got {type(cfg).__name__}")
        if changes:
            cfg = cfg.replace(**changes)
        check_run(fn, cfg, self.device_type)
        if isinstance(fn, Workload) and self._preloader is not None:
            self._preloader.seen(fn)      # at the latest: the engines import what it needs
        return Checked(fn, cfg, self.device_type)

    def run(self, fn_or_cfg=None, cfg: Optional[StepConfig] = None, *, timeout=None,
            **changes) -> Run:
        """lab.run(cfg), lab.run(workload, cfg), lab.run(my_step_fn, cfg),
        lab.run(cfg, compile="default") or lab.run(lab.check(...)). Raises ConfigError
        before dispatch, RunFailed / RunTimeout after (the run is kept in lab.history
        either way)."""
        checked = self.check(fn_or_cfg, cfg, **changes)
        fn, cfg = checked.fn, checked.cfg
        timeout = arguments.check_seconds("timeout", timeout, allow_none=True)
        self._check_usable()
        recovery.before_run(self)
        run_id = uuid.uuid4().hex[:8]
        t0 = time.time()
        ars: dict = {}
        try:
            payload = to_payload(fn) if fn is not None else None
            # the engines trust a config checked for their device (engine.run checks any
            # other); sent one rank at a time inside the try, so a Ctrl-C between two sends
            # knows which ranks hold the run
            for r, e in sorted(self.rank_to_engine.items()):
                ars[r] = self._send(e, cfg, run_id, payload, checked.device_type)
            reports, unfinished = gather.wait(self, ars, timeout or self.timeout, run_id)
        except KeyboardInterrupt:
            recovery.interrupted(self, cfg, run_id, t0, ars)
            raise KeyboardInterrupt(f"run {run_id} interrupted (Ctrl-C); kept in lab.history "
                                    "as 'interrupted'; the next lab.run starts clean") from None
        run = assemble(self, cfg, run_id, t0, reports, unfinished)
        run.flags = machine.once_per_lab(run.flags, self.said_once)
        run.env["workload"] = getattr(fn, "name", None) or getattr(fn, "__name__", None)
        self.history.add(run)
        if unfinished:
            self._replace |= set(unfinished)
            raise RunTimeout(f"run {run_id}: rank(s) {sorted(unfinished)} did not finish within "
                             f"{timeout or self.timeout:.0f} s (stuck in a collective?). "
                             + first_error(run) + "Their engines are replaced before the "
                             "next run; the history is kept.", run)
        if not run.ok:
            self._pg_broken = True
            raise RunFailed(f"run {run_id} failed: " + first_error(run), run)
        return run

    def _send(self, engine_id, cfg, run_id, payload, device_type):
        return self.client[engine_id].apply_async(engine.run, cfg, run_id, payload, device_type)

    def _check_usable(self) -> None:
        """Say why the lab cannot run, truthfully: closed by the user, or stopped. (Engines
        left stuck or dead by a run are healed by recovery.before_run, not refused.)"""
        where = (f" (the history is kept in {self.history.folder}: Lab(history=...) loads it)"
                 if self.history.folder is not None else "")
        if self.closed:
            raise LabClosed("this lab is closed (lab.close() stopped its engines); start a "
                            "new one with lab = Lab()" + where + ", or lab.restart() for "
                            "fresh engines in this one")
        if self.client is None:
            raise RuntimeError("the lab's engines are stopped; call lab.restart() for fresh "
                               "ones (history is kept)")

    # -- conveniences ----------------------------------------------------------------------
    def preloads(self) -> dict:
        """rank -> the engine's early imports: name, ok (None: still importing), seconds, error."""
        return self._preloader.records() if self._preloader is not None else {}

    def compare(self, a, b):
        """Two runs (or history ids); ``.verdict`` covers their steps only, no drift."""
        return Comparison(self._resolve(a, "a"), self._resolve(b, "b"))

    def ab(self, a, b, rounds: int = 5, metric: str = "step_ms", **kw):
        """A/B in rounds of A B B A with a verdict and its interval; ``timeout``,
        ``on_run`` and ``stop`` as in nbtools.lab.ab.ab."""
        return ab_rounds.ab(self, a, b, rounds=rounds, metric=metric, **kw)

    def advise(self, run):
        """[Suggestion] for a run (or history id), best first: nbtools.analysis.advice."""
        return self._resolve(run).advise()

    def _resolve(self, r, name: str = "run") -> Run:
        if isinstance(r, Run):
            return r
        if not isinstance(r, str):
            raise ConfigError(f"{name}={r!r}: give a Run or a run id from lab.history "
                              "(e.g. lab.history[-1] or its run_id)")
        return self.history[r]

    def panel(self, cfg_or_workload=None, cfg: Optional[StepConfig] = None):
        """The widgets, preset to ``cfg``: lab.panel(), lab.panel(cfg), or
        lab.panel(workload[, cfg]) to toggle your own model (every run is
        lab.run(workload, cfg)). In an export (NBTOOLS_STATIC) nothing could drive them:
        the panel is its static summary and timeline instead."""
        workload = cfg_or_workload if isinstance(cfg_or_workload, Workload) else None
        if workload is None:
            cfg = cfg_or_workload or cfg
        return view("lab.panel")(self, cfg, workload)

    def __repr__(self):
        return (f"<Lab {getattr(self, 'world_size', '?')} ranks on {getattr(self, 'device_type', '?')}"
                f", {len(self.history)} runs"
                + (f", compile cache {self.compile_cache}" if self.compile_cache else "") + ">")

