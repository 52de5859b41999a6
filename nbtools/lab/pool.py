"""The engines a Lab starts on this host: launched with the client watchdog, watched
for exit (code or signal, read from the launcher's own process handle), and kept one warm
spare per rank so a fault costs a swap, not a restart.

Engines started by other launchers (MPI, Slurm, SSH, an existing cluster) are not
ours to replace: the lab restarts them the old way.
"""
from __future__ import annotations

import os
import sys
import time
import uuid
from typing import Optional

from nbtools.engine import liveness
from nbtools.lab import bytecode, hub, placement, reaper
from nbtools.lab.arguments import ENGINE_GB, available_gb

# liveness.start() (watchdog, background torch import) runs as the process's first line,
# not as IPEngine's startup command: that one runs after registration (engine/boot.py)
ENGINE_CMD = [sys.executable, "-m", "nbtools.engine.boot"]


class Slot:
    """One launched engine process: which local rank (and GPU) it is for."""

    def __init__(self, launcher, local_rank: int, gpu: Optional[str]):
        self.launcher, self.local_rank, self.gpu = launcher, local_rank, gpu
        self.pid = launcher.pid
        self.created = launcher.process.create_time()
        self.engine_id: Optional[int] = None

    def exit_status(self) -> Optional[str]:
        """None while the process runs; else 'killed by SIGKILL' / 'exit code 3'."""
        proc = self.launcher.process
        if getattr(proc, "exited", False):
            return liveness.describe_exit(proc.exit_code)
        try:
            if proc.status() != "zombie":
                return None
        except Exception:
            pass        # already reaped
        # exited: the launcher's waiter thread reaps it and records the code now
        deadline = time.monotonic() + 1.0
        while not getattr(proc, "exited", False) and time.monotonic() < deadline:
            time.sleep(0.02)
        return liveness.describe_exit(getattr(proc, "exit_code", None))


class Pool:
    """A lab's local engines: one slot per started engine, plus warm spares that replace a
    dead, hung or interrupted rank in about a second."""
    def __init__(self, cluster, guard, gpus: list, threads: int, spares: bool):
        self.cluster, self.guard = cluster, guard
        self.gpus, self.threads, self.want_spares = gpus, threads, spares
        self.slots: dict[int, Slot] = {}      # pid -> slot
        self.spares: dict[int, Slot] = {}     # local rank -> a started, unused engine
        self.retired: set = set()             # engine ids killed by us (the hub may still list them)
        self.early = False                    # spares started with the ranks (start_with)
        # no room for spares beside the ranks: none until the first fault needs one (start_with)
        self.on_fault = False
        # local rank -> a second spare, where the host has room (start_with): a fault right
        # after a heal takes it instead of waiting for the spare that heal started
        self.reserve: dict[int, Slot] = {}
        self.deep = self.deep_wanted = False
        # engines read the controller's connection file themselves (engine/boot.py), so
        # they start without waiting for the controller to write it
        cluster.send_engines_connection_env = False
        self.bytecode_env = bytecode.engine_env()

    def launch(self, local_rank: int) -> Slot:
        """Start one engine for ``local_rank`` (its GPU, or its CPU thread count) and return its slot."""
        env = {"NBTOOLS_LOCAL_RANK": str(local_rank), "PYTHONUNBUFFERED": "1",
               "NBTOOLS_CLIENT_PID": str(os.getpid()), "NBTOOLS_SLOT": uuid.uuid4().hex,
               "NBTOOLS_CONNECTION_FILE": self.cluster.controller.connection_files["engine"],
               **self.bytecode_env}
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = self.gpus[local_rank]
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""
            env["OMP_NUM_THREADS"] = str(self.threads)
        set_id = self.cluster.start_engines_sync(n=1, environment=env, engine_cmd=ENGINE_CMD,
                                                  engine_args=list(hub.REGISTRATION))
        launcher = self.cluster.engines[set_id].launchers["0"]
        self.guard.watch(launcher.pid)
        slot = self.slots[launcher.pid] = Slot(launcher, local_rank, env.get("CUDA_VISIBLE_DEVICES"))
        return slot

    def fill_spares(self, local_world: int) -> None:
        """Start a spare for every local rank that has none (returns at once: the engines
        register and import torch in the background)."""
        if not self.want_spares or self.on_fault:
            return
        for spares in ((self.spares, self.reserve) if self.deep else (self.spares,)):
            for lr in range(local_world):
                if lr not in spares or spares[lr].exit_status() is not None:
                    spares[lr] = self.launch(lr)

    def start_with(self, local_world: int) -> None:
        """Start the spares together with the ranks where the host has room (two cores per
        engine process): they register and import torch while the ranks do, and Lab()
        returns with them warm (ready()), so a fault in the first run is a swap, not a wait
        for a spare still starting (issue 26: 5-10 s on H200). On a host without that room
        (2 ranks on a laptop's 2 cores) no spare starts until the first fault that needs
        one (a dead or hung engine; an exception on CPU ranks needs none): a spare's warm
        import is about 7 s of CPU there, and two of them made the person's first run after
        Lab() 2.5x slower (5 s against 2 s) for a fault that may not come. That fault waits
        for a new engine instead (a Lab()'s start, seconds); the heal then starts spares, so
        the next one is a swap. NBTOOLS_SPARES_WITH_RANKS=1 starts them with the ranks, =0
        right after Lab() has its ranks, whatever the cores."""
        forced = os.environ.get("NBTOOLS_SPARES_WITH_RANKS")     # "1" / "0": regardless of cores
        cores = os.cpu_count() or 1
        if not self.want_spares:
            return
        if forced == "1" or (forced is None and cores >= 2 * 2 * local_world):
            self.fill_spares(local_world)
            self.early = True
            # two spares per rank where that still leaves two cores per engine process
            # (1 or 2 GPUs on a 16-core host; 8 on a 128-core one); NBTOOLS_SPARE_DEPTH=1/2
            depth = os.environ.get("NBTOOLS_SPARE_DEPTH")
            self.deep_wanted = depth == "2" or (depth is None and cores >= 2 * 3 * local_world
                                                and available_gb() >= 4 * ENGINE_GB * local_world)
        elif forced is None:
            self.on_fault = True

    def after_fault(self, local_world: int) -> None:
        """A heal has replaced engines: from now on every local rank keeps a spare."""
        self.on_fault = False
        self.fill_spares(local_world)

    def ready(self, client, timeout: float) -> None:
        """Spares started with the ranks: wait (rarely long: they started together) until
        they could join (torch imported; the rest of their warm import goes on after
        Lab() returns, while the person's first run builds its model); then start the
        second spares (not waited for: a second fault comes after a first one's heal at
        the earliest)."""
        if self.early:
            self.warm_spares(client, timeout, joinable_only=True)
            self.deep = self.deep_wanted
            self.fill_spares(len(self.spares))

    def take_spare(self, client, local_rank: int, timeout: float) -> Optional[int]:
        """The engine id of a registered spare for this local rank (the reserve moves up;
        started now if there is none), or None when it did not register in time."""
        alive = [s for s in (self.spares.pop(local_rank, None), self.reserve.pop(local_rank, None))
                 if s is not None and s.exit_status() is None]
        slot = alive.pop(0) if alive else self.launch(local_rank)
        if alive:
            self.spares[local_rank] = alive[0]
        eid = self.await_engine(client, slot, timeout)
        return eid

    def warm_spares(self, client, timeout: float, joinable_only: bool = False) -> bool:
        """Block until every spare has registered and imported torch (a fault right after a
        start or a swap otherwise waits for its spare to come up); all of its warm import
        unless ``joinable_only``."""
        ok = True
        wait = liveness.wait_joinable if joinable_only else liveness.wait_warm
        for slot in list(self.spares.values()):
            eid = self.await_engine(client, slot, timeout)
            try:
                ok = ok and eid is not None and client[eid].apply_sync(wait, timeout)
            except Exception:
                ok = False
        return ok

    def await_engine(self, client, slot: Slot, timeout: float) -> Optional[int]:
        """The engine id of ``slot`` once it registers; None when it exits or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:                  # looks once even when the time is already up
            self.identify(client)
            if slot.engine_id is not None:
                return slot.engine_id
            if slot.exit_status() is not None or time.monotonic() >= deadline:
                return None
            time.sleep(0.1)

    def identify(self, client) -> None:
        """Match newly registered engine ids to the processes we launched, by pid."""
        known = {s.engine_id for s in self.slots.values()} | self.retired
        hub.catch_up(client)
        new = [e for e in client.ids if e not in known]
        if not new:
            return
        ars = {e: client[e].apply_async(placement.identity) for e in new}
        for e, ar in ars.items():
            try:
                pid = ar.get(timeout=10)["pid"]
            except Exception:
                continue
            if pid in self.slots:
                self.slots[pid].engine_id = e

    def by_engine(self, eid: int) -> Optional[Slot]:
        """The slot of engine ``eid``, or None."""
        return next((s for s in self.slots.values() if s.engine_id == eid), None)

    def retire(self, eids) -> None:
        """Kill these engines (stuck or dead ranks) with their children, now."""
        slots = [s for s in (self.by_engine(e) for e in eids) if s is not None]
        reaper.kill([(s.pid, s.created) for s in slots])
        for s in slots:
            self.slots.pop(s.pid, None)
            self.retired.add(s.engine_id)

    def all_pids(self) -> list:
        """The pids of every engine started, spares included."""
        return [s.pid for s in self.slots.values()]
