"""engine: memory per rank for StepConfig(memory=True): allocated/reserved bytes over time
(tables.MEMORY_COLUMNS, compact: one row per allocator event) and the bytes CUDA-graph
private pools hold.

Two sources. The profiler's memory events (``profile_memory=True``: one ``[memory]`` event
per allocation and free, its signed size in ``nbytes()``) cover the profiled steps on CPU
and GPU; summed they give what was allocated since the profile began (the profiler does
not say what was allocated before: on CUDA ``memory_allocated()`` at its start is the base,
on CPU nothing is known, so CPU rows start at 0). On CUDA the caching allocator's own
history (``torch.cuda.memory._record_memory_history``, kept from the run's first step)
replaces it: every alloc, free and segment (reserved) change with its time, and the
snapshot's segments say which belong to a CUDA-graph private pool (pool id != (0, 0)).
"""
from __future__ import annotations

import time

import numpy as np
import torch

MAX_ENTRIES = 200_000       # the allocator's ring buffer: about 100 bytes an entry


class MemoryRecorder:
    """``start()`` before the warm-up, ``profiler_kwargs()`` for the profiler,
    ``collect(prof)`` at the end -> {"memory": wire columns, "graph_pool_mb": float}."""

    def __init__(self, cfg, device, rank: int):
        self.on, self.rank = bool(getattr(cfg, "memory", False)), rank
        self.cuda = device.type == "cuda"
        self.history = False
        self.base = (0, 0)

    def start(self) -> None:
        """Start CUDA's allocator history (CUDA-graph pools included) when memory is recorded on
        CUDA; without the private API the profiler's memory events remain."""
        if not (self.on and self.cuda):
            return
        self.base = (torch.cuda.memory_allocated(), torch.cuda.memory_reserved())
        self.t0_ns = time.time_ns()
        try:   # private API (torch >= 2.1); without it the profiler's events remain
            torch.cuda.memory._record_memory_history(enabled="all", context=None,
                                                     max_entries=MAX_ENTRIES)
            self.history = True
        except Exception:  # noqa: BLE001
            self.history = False

    def profiler_kwargs(self) -> dict:
        """The profiler's arguments for memory: profile_memory=True when memory is recorded."""
        return dict(profile_memory=True) if self.on else {}

    def collect(self, prof) -> dict:
        """The memory lane's table and graph_pool_mb: from the allocator history when it ran
        (then stopped), else from the profiler's events ({} when memory is off)."""
        if not self.on:
            return {}
        if self.history:
            try:
                return self._from_history()
            finally:
                torch.cuda.memory._record_memory_history(enabled=None)
        return {"memory": self._from_profiler(prof) if prof is not None else _wire(self.rank, []),
                "graph_pool_mb": float("nan")}

    def _from_profiler(self, prof) -> dict:
        dev = torch.device("cuda" if self.cuda else "cpu")
        rows = [(e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                if e.name() == "[memory]" and _same_device(e, dev)]
        rows.sort()
        ts = np.array([r[0] for r in rows], np.int64)
        alloc = self.base[0] + np.cumsum(np.array([r[1] for r in rows], np.int64))
        reserved = np.full(len(ts), np.nan) if not self.cuda else \
            np.full(len(ts), float(torch.cuda.memory_reserved()))
        return _wire(self.rank, list(zip(ts.tolist(), alloc.tolist(), reserved.tolist(),
                                          [0] * len(ts))))

    def _from_history(self) -> dict:
        snap = torch.cuda.memory._snapshot()
        pools = [(s["address"], s["address"] + s["total_size"]) for s in snap["segments"]
                 if tuple(s.get("segment_pool_id", (0, 0))) != (0, 0)]
        pool_bytes = sum(b - a for a, b in pools)
        starts = np.array(sorted(a for a, _ in pools), np.int64)
        ends = np.array([b for _, b in sorted(pools)], np.int64)

        def in_pool(addr):
            i = np.searchsorted(starts, addr, side="right") - 1
            return i >= 0 and addr < ends[i]

        trace = snap["device_traces"][torch.cuda.current_device()] \
            if snap.get("device_traces") else []
        # time_us is the allocator's clock (epoch µs); convert to the run's epoch ns
        alloc, res, pool = self.base[0], self.base[1], 0
        rows = []
        for e in trace:
            act, size = e.get("action"), int(e.get("size", 0))
            if act == "alloc":
                alloc += size
                pool += size if in_pool(e.get("addr", -1)) else 0
            elif act == "free_completed":
                alloc -= size
                pool -= size if in_pool(e.get("addr", -1)) else 0
            elif act in ("segment_alloc", "segment_map"):
                res += size
            elif act in ("segment_free", "segment_unmap"):
                res -= size
            else:
                continue
            rows.append((int(e.get("time_us", 0)) * 1000, alloc, res, max(pool, 0)))
        return {"memory": _wire(self.rank, rows), "graph_pool_mb": pool_bytes / 2**20}


def _same_device(e, dev) -> bool:
    kind = str(e.device_type())
    return kind.endswith("CUDA") if dev.type == "cuda" else kind.endswith("CPU")


def _wire(rank: int, rows: list) -> dict:
    cols = list(zip(*rows)) if rows else [[], [], [], []]
    return {"rank": np.full(len(rows), rank, np.int32), "ts_ns": np.array(cols[0], np.int64),
            "allocated": np.array(cols[1], np.float64), "reserved": np.array(cols[2], np.float64),
            "graph_pool": np.array(cols[3], np.float64)}
