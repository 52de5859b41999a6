"""Starting a lab's engines (on its own controller, local or any ipyparallel launcher, or on
other hosts: lab/hosts.py) and joining them in one process group: Lab._start calls both;
a healed lab (recovery, hosts) joins again through Lab._join."""
from __future__ import annotations

import os
import time

from nbtools.common.atomic import WriteFailed, disk_full
from nbtools.config.step_config import ConfigError
from nbtools.engine import process_group
from nbtools.lab import arguments, hosts, hub, placement
from nbtools.lab.pool import Pool


def launch(lab, ipp) -> list:
    """Controller and engines on this lab's own profile folder (inside workdir, so the
    connection files and logs go with the lab); every process is told to the guard."""
    if hosts.wanted(lab.engines):
        spec = lab.engines if isinstance(lab.engines, hosts.SSH) else hosts.SSH(lab.engines)
        lab.hosts = hosts.Hosts(lab, spec)
        return lab.hosts.launch(ipp)
    n, gpus = count(lab)
    try:
        return _launch(lab, ipp, n, gpus)
    except OSError as e:
        # ipyparallel writes its connection and cluster files itself, past common/atomic.py:
        # a full disk was "[Errno 27] File too large", naming no file
        if e.filename or not disk_full(e):
            raise
        raise WriteFailed(lab.workdir / "ipython", e, existed=False) from None


def _launch(lab, ipp, n: int, gpus: list) -> list:
    from nbtools.lab.launchers import EngineSetLauncher, start_controller
    local = lab.engines == "local"
    lab.cluster = start_controller(ipp, EngineSetLauncher if local else lab.engines,
                                   lab.workdir, lab._guard)
    if local:
        threads = placement.threads_per_rank(os.cpu_count(), n) if not gpus else 0
        lab.pool = Pool(lab.cluster, lab._guard, gpus, threads, lab.spares)
        slots = [lab.pool.launch(i) for i in range(n)]
        lab.pool.start_with(n)
    else:
        lab.cluster.start_engines_sync(n=n)
        for es in lab.cluster.engines.values():   # the launcher's local process (mpiexec, ...)
            if getattr(es, "pid", None):
                lab._guard.watch(es.pid)
    lab.client = lab.cluster.connect_client_sync()
    if lab.pool is None:
        if not hub.wait_for(lab.client, n, lab.start_timeout):
            raise TimeoutError(f"{len(lab.client.ids)} of {n} engines registered within "
                               f"start_timeout={lab.start_timeout:g} s")
        return sorted(lab.client.ids)
    deadline = time.monotonic() + lab.start_timeout       # one wait for all, not one each
    ids = [lab.pool.await_engine(lab.client, s, deadline - time.monotonic()) for s in slots]
    ended = [s for s, e in zip(slots, ids) if e is None and s.exit_status() is not None]
    if ended:       # their words now: the lab's folder goes when the start fails
        from nbtools.lab.launchers import output_tail
        raise RuntimeError("engine(s) ended before registering: " + "; ".join(
            f"local rank {s.local_rank} ({s.exit_status()}): {output_tail(s.launcher)}"
            for s in ended))
    if None in ids:
        raise TimeoutError(f"{ids.count(None)} of {n} engine(s) did not register within "
                           f"start_timeout={lab.start_timeout:g} s")
    return ids


def count(lab) -> tuple[int, list]:
    """(ranks, GPU ids for local engines). GPUs are counted without initialising CUDA
    in this process (the client needs no GPU)."""
    gpus = placement.visible_gpus() if lab.engines == "local" else []
    n = lab._n_requested or len(gpus) or 2
    if gpus and n > len(gpus):
        raise ConfigError(f"Lab(n={n}) but only {len(gpus)} GPUs are visible; one engine "
                          "per GPU. Use n <= the GPU count.")
    return n, gpus[:n]


def join(lab, ids) -> None:
    """Ranks from what the engines report, then one process group over them. Also how
    a healed lab rejoins: survivors leave their old group inside engine.setup."""
    idents = lab._on(ids, placement.identity)
    lab.placements = placement.assign(dict(zip(ids, idents)))
    by_eid = {p.engine_id: p for p in lab.placements}
    lab._on(ids, placement.pin, args_for=lambda e: (by_eid[e].local_rank,))
    infos = lab._on(ids, process_group.info)
    types = {i["device_type"] for i in infos}
    if len(types) != 1:
        raise RuntimeError(f"engines disagree on the device type: {types}; give every "
                           "engine a GPU or none")
    lab.device_type = types.pop()
    lab.infos = {by_eid[e].rank: i for e, i in zip(ids, infos)}
    lab.rank_to_engine = {p.rank: p.engine_id for p in lab.placements}
    r0 = lab.rank_to_engine[0]
    addr = placement.master_addr(lab.placements)
    # rank 0 opens the store's socket on exactly that address (loopback on one host)
    port = lab.client[r0].apply_sync(process_group.listen, addr)
    world = len(lab.placements)
    cpus = {p.rank: lab.infos[p.rank]["cpus"] for p in lab.placements}
    args = {p.engine_id: (p.rank, world, addr, port,
                          placement.threads_per_rank(cpus[p.rank], p.local_world)
                          if lab.device_type == "cpu" else 0,
                          str(arguments.rank_cache(lab.compile_cache or lab.workdir
                                                   / "inductor-cache", p,
                                                   lab.compile_cache_per)),
                          lab.pg_timeout) for p in lab.placements}
    lab.setup_times = lab._on(ids, process_group.setup, args_for=lambda e: args[e],
                              timeout=lab.start_timeout)
    lab.world_size = world
    if lab.device_type == "cpu":
        placement.say_oversubscribed(lab, {p.engine_id: args[p.engine_id][4]
                                           for p in lab.placements}, cpus)
