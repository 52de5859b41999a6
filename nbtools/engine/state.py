"""The one EngineState of an engine process: its rank, group, store and the state built on
them (model, optimizer, compiled step), reused across runs."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class EngineState:
    """Everything an engine keeps between runs: its rank and process group, the built
    workload and compiled callables, reused while the scenario and shapes stay the same."""
    rank: int = -1
    world: int = 0
    device: object = None
    group: object = None
    store: object = None
    listener: object = None      # rank 0's store socket between listen() and setup()
    generation: int = 0
    pg_timeout: float = 300.0
    pg_broken: bool = False
    recorder: object = None
    model_key: tuple = ()
    build_key: tuple = ()
    workload: object = None
    prepared: object = None
    cache: dict = field(default_factory=dict)     # strategy state kept with the weights
    custom_state: dict = field(default_factory=dict)
    reports: list = field(default_factory=list)   # ctx.report() rows of the current run
    run_count: int = 0
    model_built_at: int = -1     # the engine's run count when the current weights were built
    # (code, build fields) -> the id of the last run that compiled graphs for them: a run
    # that compiles none ran that run's graphs, and its recompiles are in that run's tables
    compiled_in: dict = field(default_factory=dict)
    # set: the background import (liveness) goes on past torch.distributed (setup is done,
    # or someone waits for all of it)
    import_rest: threading.Event = field(default_factory=threading.Event)
    warm_thread: object = None   # liveness's background import, while this engine has one

    def finish_warm_import(self, timeout: float | None = None) -> bool:
        """Block until the background import is done (a run calls this before its steps:
        Lab() returns before it is, and none of it may run beside a timed step); whether
        it is. Lets the rest of the import begin now if it still waited for a setup."""
        t = self.warm_thread
        if t is None:
            return True
        self.import_rest.set()
        t.join(timeout)
        return not t.is_alive()

    def release_model(self, everything: bool = False) -> None:
        """Drop the previous model, optimizer and compiled step before building the next.
        Compiled and FSDP2-wrapped modules sit in reference cycles, so without a collection
        the old model and its optimizer state stayed allocated and counted in the next run's
        peak memory (on H200 the peak of notebook 04's FSDP2 runs grew run after run).
        ``everything``: collect what the engine froze at its start too (after a failure)."""
        from nbtools.engine import quiet
        self.prepared = self.workload = None
        self.cache.clear()
        quiet.collect(everything)
        if self.device is not None and self.device.type == "cuda":
            import torch
            torch.cuda.empty_cache()


S = EngineState()
