"""An engine's place in the torch.distributed job: what it is, joining the group on a store
opened on the ranks' own address, a fresh group after a failure, a bounded teardown, and
how a failing rank releases its peers.

The client calls these through ipyparallel (nbtools/lab/lab.py); they return plain data.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from datetime import timedelta

from nbtools.engine.state import S as _S


def info() -> dict:
    """What this engine is, read before ranks are assigned (ids follow registration order)."""
    import torch
    cuda = torch.cuda.is_available()
    return dict(host=socket.gethostname(), pid=os.getpid(),
                local_rank=int(os.environ.get("NBTOOLS_LOCAL_RANK", os.environ.get("LOCAL_RANK", -1))),
                cuda_visible=os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                device_type="cuda" if cuda else "cpu",
                device_name=torch.cuda.get_device_name(0) if cuda else "cpu",
                gpus=torch.cuda.device_count() if cuda else 0, cpus=os.cpu_count(),
                torch=str(torch.__version__))   # a TorchVersion would import torch in the client


def listen(addr: str) -> int:
    """Rank 0: open the store's listening socket on exactly ``addr`` (TCPStore alone
    binds every interface); setup() hands it over. Returns the port for the other ranks."""
    if _S.listener is not None:
        _S.listener.close()
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    host = socket.getaddrinfo(addr, None, family, socket.SOCK_STREAM)[0][4][0]
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, 0))
    s.listen(512)
    _S.listener = s
    return s.getsockname()[1]


def setup(rank: int, world: int, master_addr: str, port: int, threads: int,
          cache_dir: str, pg_timeout_s: float) -> dict:
    """Join the process group. Rank 0 hosts the store; the same store carries the failure
    flag that lets a failing rank release its peers. Called again on a surviving engine
    when the lab swaps a spare in for another rank: it leaves its old group first."""
    import torch
    import torch.distributed as dist
    t0 = time.perf_counter()
    if dist.is_initialized():
        # the lab is swapping in a spare for a dead or stuck peer: an orderly destroy
        # waits on that peer (5 s on gloo), an abort does not
        bounded(_abort, 5.0)
        _S.group, _S.prepared, _S.build_key, _S.model_key = None, None, (), ()
        _S.custom_state.clear()
        _S.cache.clear()
    if threads > 0:
        torch.set_num_threads(threads)
    # the lab's cache folder for this rank: shared by the ranks on a host (each kernel built
    # once) or the rank's own (Lab(compile_cache_per="rank"): every rank compiles cold)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR=master_addr,
                      MASTER_PORT=str(port))
    _loopback_transport(master_addr)
    cuda = torch.cuda.is_available()
    _S.device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(_S.device)
    _S.rank, _S.world = rank, world
    kw = {}
    if rank == 0 and _S.listener is not None:
        kw["master_listen_fd"] = _S.listener.detach()    # the store owns the fd from here
        _S.listener = None
    t1 = time.perf_counter()
    _S.store = dist.TCPStore(master_addr, port, world, is_master=rank == 0,
                             timeout=timedelta(seconds=pg_timeout_s), **kw)
    _S.pg_timeout = pg_timeout_s
    _S.generation = 0      # a new store: every rank, spare or survivor, counts from here
    t2 = time.perf_counter()
    _init_pg()
    t3 = time.perf_counter()
    # The compile recorder (torch._dynamo, pandas: seconds to import) is made and installed
    # by the first run (runner.recorder()), not here: Lab() does not wait for it. The
    # engine's background import loads them from now on (it waited for this call).
    _S.import_rest.set()
    return dict(rank=rank, backend=str(dist.get_backend()), leave_s=t1 - t0, store_s=t2 - t1,
                group_s=t3 - t2)


def _loopback_transport(master_addr: str) -> None:
    """One host: gloo's and NCCL's own sockets on loopback too (by default they pick the
    host's first interface and listen there). A user's choice of interface stands."""
    import ipaddress
    try:
        if not ipaddress.ip_address(master_addr).is_loopback:
            return
    except ValueError:
        return
    import psutil
    lo = next((name for name, addrs in psutil.net_if_addrs().items()
               if any(a.address == master_addr for a in addrs)), None)
    if lo:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", lo)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", lo)


def _init_pg() -> None:
    import torch.distributed as dist
    _S.generation += 1
    store = dist.PrefixStore(f"nbtools/{_S.generation}", _S.store)
    backend = "nccl" if _S.device.type == "cuda" else "gloo"
    kw = dict(device_id=_S.device) if _S.device.type == "cuda" else {}
    dist.init_process_group(backend, store=store, rank=_S.rank, world_size=_S.world,
                            timeout=timedelta(seconds=_S.pg_timeout), **kw)
    _S.group = dist.group.WORLD
    _S.pg_broken = False


def reinit_pg() -> int:
    """After a failed run aborted the group: a fresh one on the same store, all ranks.
    Used on gloo; NCCL engines are restarted instead (re-initialising after an abort was
    not reliable on H200 / torch 2.11)."""
    import torch.distributed as dist
    if dist.is_initialized():
        bounded(dist.destroy_process_group, 10.0)
    _init_pg()
    _S.prepared, _S.build_key, _S.model_key = None, (), ()   # wrappers hold the old group
    _S.cache.clear()
    return _S.generation


def shutdown(timeout_s: float = 10.0) -> bool:
    """Teardown, bounded: destroy_process_group has been seen to hang after
    reduce-overhead with functional collectives."""
    import torch.distributed as dist
    if dist.is_initialized():
        return bounded(dist.destroy_process_group, timeout_s)
    return True


def bounded(fn, timeout_s) -> bool:
    """Run ``fn`` in a daemon thread for at most ``timeout_s``; True when it returned in time
    (a destroy stuck in a collective must not hang the engine)."""
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    t.join(timeout_s)
    return not t.is_alive()


def release_peers(run_id: str, error: str) -> None:
    """Mark the failure in the store, then abort our communicators: a gloo peer blocked in
    a collective with us gets 'connection closed' at once instead of waiting for the
    timeout; NCCL peers are told through the store by their own watcher."""
    import torch.distributed as dist
    # The state built on this group (models, DDP, TP blocks) goes first: it holds the group,
    # and gloo closes its connections, which is what releases a peer blocked in a
    # collective with us, only when the group is freed. References from inside torch can
    # still keep it alive, so the client also restarts ranks left waiting (cluster.py).
    _S.group, _S.build_key, _S.model_key = None, (), ()
    _S.custom_state.clear()
    _S.release_model(everything=True)    # the group was frozen with the engine's start-up heap
    try:
        _S.store.set(f"failed/{run_id}", f"rank {_S.rank}: {error.splitlines()[0][:300]}")
    except Exception:
        pass
    if dist.is_initialized():
        # Bounded: on NCCL the abort itself was seen to block for the PG timeout (H200,
        # torch 2.11) after it had already released the peer; the lab restarts CUDA engines
        # after a failure anyway.
        bounded(_abort, 5.0)
    _S.pg_broken = True


def _abort() -> None:
    import torch.distributed as dist
    try:
        dist.distributed_c10d._abort_process_group()
    except Exception:
        dist.destroy_process_group()


class PeerWatch:
    """While a run is in flight, poll the store for a peer's failure flag; on NCCL, abort our
    communicators so a collective waiting on the failed peer returns."""

    def __init__(self, run_id):
        self.run_id, self.stop, self.peer_error = run_id, threading.Event(), None

    def __enter__(self):
        if _S.world > 1:
            self.t = threading.Thread(target=self._loop, daemon=True)
            self.t.start()
        return self

    def _loop(self):
        import torch.distributed as dist
        key = f"failed/{self.run_id}"
        from nbtools.engine.quiet import poll_interval
        while not self.stop.wait(poll_interval(0.25)):
            try:
                if _S.store.check([key]):
                    self.peer_error = _S.store.get(key).decode()
                    if _S.device.type == "cuda" and dist.is_initialized():
                        _S.pg_broken = True
                        _abort()     # frees a sync waiting on the failed peer (~1 s on H200)
                    return
            except Exception:
                return

    def __exit__(self, *exc):
        self.stop.set()
        return False
