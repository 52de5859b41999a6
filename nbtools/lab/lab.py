"""Lab: ipyparallel engines, one per GPU (or n CPU ranks on gloo), joined in one
torch.distributed job that stays up while the notebook toggles configs."""
from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable, Optional

from nbtools.engine import process_group, runner as engine
from nbtools.lab import engine_output, gather, hosts, progress_view, start, preload as preloading
from nbtools.lab.assemble import keep
from nbtools.lab import arguments, reaper, usable
from nbtools.lab.arguments import Checked, resolve_run
from nbtools.lab import recovery
from nbtools.common.interrupts import held
from nbtools.config.step_config import ConfigError, StepConfig
from nbtools.results.history import History
from nbtools.results.run import Run
from nbtools.results.errors import RunFailed, RunTimeout
from nbtools.config.workload import Workload, check_run, to_payload
from nbtools.results.comparison import Comparison
from nbtools.lab import ab as ab_rounds
from nbtools.results.views import view


class Lab:
    """One engine per visible GPU (no GPU: ``n`` CPU ranks, default 2, on gloo), joined in one
    torch.distributed job that stays up while you toggle configs. Close it (or use ``with``).

    Args:
        n: ranks; default one per visible GPU, else 2.
        engines: an ipyparallel launcher ("local", "mpi", "slurm", "ssh", ...) or hosts.SSH.
        cluster: an existing ipyparallel Cluster or Client to use instead of starting one.
        history: the folder runs are saved to as they complete (None: memory only).
        timeout: seconds a run may take; pg_timeout: torch.distributed's collective timeout.
        start_timeout: seconds the engines may take to start and join.
        peer_grace: seconds other ranks may run on after one failed before the lab treats
            them as stuck in a collective and replaces their engines.
        spares: a warm engine per rank (local engines only) swaps in for a dead, hung or
            interrupted one in about a second; under 4 cores a rank, with the first heal.
        compile_cache: a folder for the inductor caches that outlives the lab (a later lab
            starts warm); default ``$NBTOOLS_COMPILE_CACHE``, else a new, cold one per lab.
        compile_cache_per: "host" (a host's ranks share one folder; inductor locks each
            kernel's build) or "rank" (``DIR/rank0``, ...: cold compiles per rank).
        echo: False: the lab prints nothing (True: engine output, library log lines once per
            kind, progress as one line in place on a terminal). ``progress`` (attribute):
            each rank's phase while a run runs; False for none, or a callable taking the text.
        preload: engines import a Workload's modules in the background as soon as the lab
            sees it (lab/preload.py); ``lab.preloads()`` says what, and how long it took.

    ``engine_warnings`` holds the last run's library log lines per rank in full, ``engine_log``
    every run's by kind; "host busy" is said once per lab (``notes``, ``said_once``).

    Example:
        >>> from nbtools import Lab, StepConfig
        >>> with Lab() as lab:                       # 2 CPU ranks here, one per GPU there
        ...     run = lab.run(StepConfig(compile="default"))
        ...     run.summary[["rank", "step_ms"]]
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
        self.engine_log = engine_output.EngineLog()   # every run's, by kind
        self.notes, self.explorations = [], []   # what it said once; lab.explore's results
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
                ids = start.launch(self, ipp)
            self._join(ids)
            if len({p.host for p in self.placements}) > 1 or self._external is not None:
                progress_view.say(self, hosts.describe(self.placements))
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

    def _join(self, ids) -> None:
        """Ranks, then one process group over them (nbtools.lab.start.join)."""
        start.join(self, ids)

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
        """Stop every engine this lab started and remove its folders; history stays on disk."""
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
        """Run one config on every rank and bring back one Run (kept in ``lab.history``).

        Args:
            fn_or_cfg: a StepConfig, a Workload, your own step function ``fn(ctx)``, or
                what ``lab.check(...)`` returned.
            cfg: the StepConfig for a Workload or step function (default StepConfig()).
            timeout: seconds for this run (default the lab's ``timeout``).
            **changes: StepConfig fields to change first (``lab.run(cfg, batch=8)``).

        Returns:
            Run: every rank's steps, events, compile events and summary.

        Raises:
            ConfigError: before dispatch, when the config cannot run on these engines.
            RunFailed: a rank raised (``.run`` holds the run, kept in history too).
            RunTimeout: a rank did not finish in time; its engine is replaced.
            KeyboardInterrupt: Ctrl-C; it says what was kept (``.run``) and where.

        Example:
            >>> run = lab.run(StepConfig(scenario="tp-mlp-infer", compile="reduce-overhead"))
            >>> run = lab.run(workload, StepConfig(autocast="bf16"), parallel="ddp")
        """
        checked = self.check(fn_or_cfg, cfg, **changes)
        fn, cfg = checked.fn, checked.cfg
        timeout = arguments.check_seconds("timeout", timeout, allow_none=True) or self.timeout
        usable.check_usable(self)
        recovery.ready(self)
        run_id, t0, ars = uuid.uuid4().hex[:8], time.time(), {}
        # Ctrl-C raises while the ranks work, then waits for the run to be kept and saved
        with held(f"run {run_id} is being kept and saved first", holding=False) as h:
            try:
                payload = to_payload(fn) if fn is not None else None
                # sent one rank at a time inside the try: a Ctrl-C between two sends knows
                # which ranks hold the run (engines trust a config checked for their device)
                for r, e in sorted(self.rank_to_engine.items()):
                    ars[r] = self._send(e, cfg, run_id, payload, checked.device_type)
                reports, unfinished = gather.wait(self, ars, timeout, run_id)
                h.hold()
            except KeyboardInterrupt:
                h.hold()
                raise recovery.interrupted(self, cfg, run_id, t0, ars, h) from None
            run = h.run = keep(self, fn, cfg, run_id, t0, reports, unfinished)
            h.message = recovery.kept_text(self, run)
        if unfinished:
            raise RunTimeout(f"run {run_id}: rank(s) {sorted(unfinished)} did not finish within "
                             f"{timeout:.0f} s (stuck in a collective?). {run.first_error()}Their "
                             "engines are replaced before the next run; the history is kept.", run)
        if not run.ok:
            raise RunFailed(f"run {run_id} failed: " + run.first_error(), run)
        return run

    def _send(self, engine_id, cfg, run_id, payload, device_type):
        return self.client[engine_id].apply_async(engine.run, cfg, run_id, payload, device_type)

    # -- conveniences ----------------------------------------------------------------------
    def preloads(self) -> dict:
        """rank -> the engine's early imports: name, ok (None: still importing), seconds, error."""
        return self._preloader.records() if self._preloader is not None else {}

    def compare(self, a, b, rounds: int = 1, metric: str = "step_ms", **kw):
        """Compare two runs already made. With ``rounds=1`` (the default) one run a side:
        the verdict covers their steps only, not drift between runs. With more, their
        configs run again in that many A B B A rounds (as ``ab``) and those are compared.

        Args:
            a: a Run, or a run id from ``lab.history``.
            b: the other, read as B over A.
            rounds: 1, or the rounds to run the two configs again in.
            metric: the summary metric the verdict judges.
            **kw: ``workload`` (for runs of your own step: the Workload or step to run
                again), and ``timeout``, ``on_run``, ``stop`` as in ``ab``.

        Returns:
            Comparison: ``.verdict``, ``.table``, ``.plot()``.

        Example:
            >>> print(lab.compare(lab.history[-2], lab.history[-1]).verdict)
            >>> again = lab.compare(lab.history[-2], lab.history[-1], rounds=5)
        """
        return ab_rounds.compare(self, a, b, rounds, metric, **kw)

    def ab(self, a, b, rounds: int = 5, metric: str = "step_ms", **kw):
        """A/B in interleaved rounds (A B B A, so a linear drift cancels in each round).

        Args:
            a: side A: a StepConfig, a (workload, cfg) pair or a (workload, {fields}) pair.
            b: side B, in the same forms.
            rounds: complete rounds to run, or "auto": stop when resolved (``max_rounds``).
            metric: the summary metric the verdict judges (nbtools.analysis.metrics).
            **kw: ``timeout``, ``on_run``, ``stop``, ``max_rounds``, ``width``, ``equivalence``
                (default 0.02: "no difference bigger than 2 %" when the interval lies
                inside it): nbtools.lab.ab.ab.

        Returns:
            Comparison: ``.verdict`` is B over A with its 95 % interval over the rounds.

        Example:
            >>> cmp = lab.ab(StepConfig(), StepConfig(compile="default"), rounds=5)
            >>> cmp.verdict.resolved, cmp.verdict.ratio
        """
        return ab_rounds.ab(self, a, b, rounds=rounds, metric=metric, **kw)

    def advise(self, run):
        """What a run's tables say to try, best first (nbtools.analysis.advice): hypotheses
        until an A/B proves them; a run on reused graphs gets their compiler run's findings.

        Args:
            run: a Run, or a run id from ``lab.history``.

        Returns:
            list[Suggestion]: each with ``change`` (StepConfig fields), evidence, why, code.

        Example:
            >>> for s in lab.advise(run): print(s.change, s.why)
        """
        from nbtools.analysis.advice import advise
        from nbtools.lab.tried import seen_for
        run = resolve_run(self, run)
        return advise(run, self.history.compiled_by(run), seen=seen_for(self, run))

    def explore(self, target, start=None, budget_s=600, rounds=5, **kw):
        """Advise ``start``'s run and try each suggestion as an A/B (``rounds`` of A B B A)
        of the best so far against best + change, keeping what is resolved faster, within
        ``budget_s`` wall seconds. ``target``: a Workload, a step, or a StepConfig. Returns an
        Exploration (``steps``, ``best``, ``verdict``, ``code()``, ``plot()``); keywords and
        the rest: nbtools.lab.explore.explore and docs/ab.md."""
        from nbtools.lab.explore import explore
        return explore(self, target, start, budget_s, rounds, **kw)

    def panel(self, cfg_or_workload=None, cfg: Optional[StepConfig] = None):
        """The widgets (toggles, live timeline, history, A/B, export) driving this lab.

        Args:
            cfg_or_workload: a StepConfig to preset, or a Workload to toggle your own model
                (every run is then ``lab.run(workload, cfg)``).
            cfg: the preset when the first argument is a Workload.

        Returns:
            Panel: display it. In an export (NBTOOLS_STATIC) nothing could drive it, so it
            is the last run's static summary and timeline instead.

        Example:
            >>> lab.panel(StepConfig(scenario="fsdp2-train"))
        """
        workload = cfg_or_workload if isinstance(cfg_or_workload, Workload) else None
        if workload is None:
            cfg = cfg_or_workload or cfg
        return view("lab.panel")(self, cfg, workload)

    def __repr__(self):
        return (f"<Lab {getattr(self, 'world_size', '?')} ranks on {getattr(self, 'device_type', '?')}"
                f", {len(self.history)} runs"
                + (f", compile cache {self.compile_cache}" if self.compile_cache else "") + ">")

