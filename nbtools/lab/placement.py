"""Which engine is which rank: pure functions over what the engines report.

ipyparallel numbers engines in registration order, not launch order, so ranks come from
each engine's (host, local rank, pid). Engines started by MPI/Slurm report a local rank
from their launcher's environment; local engines get one from the Lab; others get one by
order within their host.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from nbtools.config.step_config import ConfigError
from nbtools.lab.progress_view import say

# Launchers' local-rank variables, most specific first.
LOCAL_RANK_VARS = ("NBTOOLS_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                   "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                   "PMI_LOCAL_RANK", "PALS_LOCAL_RANKID")

# Launchers' global-rank variables: hosts are ordered as the launcher ranked them
# (mpirun -H node1:4,node2:4 puts node1's engines first), not as they registered.
GLOBAL_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID",
                    "MV2_COMM_WORLD_RANK", "PALS_RANKID")


@dataclass(frozen=True)
class Placement:
    """Where a rank runs: its engine, host and pid, its global rank, and its local rank
    among the ranks on that host."""
    engine_id: int
    host: str
    pid: int
    rank: int
    local_rank: int
    local_world: int


def identity() -> dict:
    """Runs on an engine before torch touches CUDA (so it can still be pinned)."""
    import socket
    local = -1
    for var in LOCAL_RANK_VARS:
        if os.environ.get(var, "").strip().lstrip("-").isdigit():
            local = int(os.environ[var])
            break
    launched = next((int(os.environ[v]) for v in GLOBAL_RANK_VARS
                     if os.environ.get(v, "").strip().isdigit()), -1)
    return dict(host=socket.gethostname(), pid=os.getpid(), local_rank=local,
                launcher_rank=launched, cuda_visible=os.environ.get("CUDA_VISIBLE_DEVICES"))


def assign(identities: dict) -> list[Placement]:
    """identities: engine id -> identity() dict. Hosts are ordered by their lowest
    launcher rank where every engine reports one (MPI, Slurm), else by their first engine
    id (stable across restarts of one launcher); within a host, by reported local rank,
    then pid. Duplicated local ranks on one host are an error a person must fix."""
    by_host: dict[str, list] = {}
    order = sorted(identities)
    if all(i.get("launcher_rank", -1) >= 0 for i in identities.values()):
        order.sort(key=lambda e: identities[e]["launcher_rank"])
    for eid in order:
        ident = identities[eid]
        by_host.setdefault(ident["host"], []).append((eid, ident))
    out, rank = [], 0
    for host, members in by_host.items():
        known = [m for m in members if m[1].get("local_rank", -1) >= 0]
        locals_ = [m[1]["local_rank"] for m in known]
        if len(set(locals_)) != len(locals_):
            dup = sorted({x for x in locals_ if locals_.count(x) > 1})
            raise ValueError(f"host {host}: engines report the same local rank {dup}; check "
                             "the launcher's environment (LOCAL_RANK / SLURM_LOCALID ...)")
        if known and len(known) != len(members):
            raise ValueError(f"host {host}: some engines report a local rank and some do not; "
                             "start all engines on a host the same way")
        if known:
            members = sorted(members, key=lambda m: m[1]["local_rank"])
        else:
            members = sorted(members, key=lambda m: m[1]["pid"])
        for local, (eid, ident) in enumerate(members):
            out.append(Placement(eid, host, ident["pid"], rank, local, len(members)))
            rank += 1
    return out


def master_addr(placements: list[Placement]) -> str:
    """Rank 0's host. On one host, loopback avoids name resolution surprises."""
    hosts = {p.host for p in placements}
    r0 = next(p for p in placements if p.rank == 0)
    return "127.0.0.1" if len(hosts) == 1 else r0.host


def threads_per_rank(cpus: int, local_world: int) -> int:
    """CPU ranks share the host's cores: each gets its share (at least one)."""
    return max(1, (cpus or 1) // max(1, local_world))


def pin(local_rank: int) -> str:
    """On an engine not started by the Lab: see one GPU as cuda:0 (identical device names
    keep compile-cache keys identical across ranks). Must run before CUDA initialises;
    a launcher that already chose one device is respected."""
    current = os.environ.get("CUDA_VISIBLE_DEVICES")
    if current is not None and "," not in current:
        return current
    devices = current.split(",") if current else None
    chosen = devices[local_rank % len(devices)] if devices else str(local_rank)
    os.environ["CUDA_VISIBLE_DEVICES"] = chosen
    return chosen


def visible_gpus() -> list:
    """GPU ids this client may hand out, honouring CUDA_VISIBLE_DEVICES, via nvidia-smi so
    the client never initialises CUDA."""
    import shutil
    import subprocess
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout
    except Exception:
        return []
    return [line.strip() for line in out.splitlines() if line.strip().isdigit()]


def say_oversubscribed(lab, threads: dict, cpus: dict) -> None:
    """Once per lab, on CPU: where the ranks on a host have more threads than the cores they
    share (engine id -> threads per rank; rank -> cores), say it on stderr and in
    ``lab.notes``; runs then leave their own host-busy flag out (lab.said_once)."""
    from nbtools.analysis import machine
    if "host-busy" in lab.said_once:
        return
    shared = {p.host: (p.local_world, threads[p.engine_id], cpus[p.rank] or 1)
              for p in lab.placements}
    for note in machine.oversubscribed(shared):
        say(lab, note)
        lab.notes.append(note)
        lab.said_once.add("host-busy")


def count(engines: str, n_requested) -> tuple[int, list]:
    """(ranks, GPU ids for local engines). GPUs are counted without initialising CUDA
    in this process (the client needs no GPU)."""
    gpus = visible_gpus() if engines == "local" else []
    n = n_requested or len(gpus) or 2
    if gpus and n > len(gpus):
        raise ConfigError(f"Lab(n={n}) but only {len(gpus)} GPUs are visible; one engine "
                          "per GPU. Use n <= the GPU count.")
    return n, gpus[:n]
