"""Client-side helpers the claim notebooks (notebooks/0*.ipynb) call, so a notebook cell stays a few
lines: sweeps, one-row-per-run tables, counts read off a run's timeline, and custom step
functions for experiments the built-in scenarios cannot express.

Client side: ``table``, ``speedup``, ``compile_counts``, ``compile_signatures``,
``compiled_regions``, ``collectives``, ``graph_capture``, ``sync_counts`` / ``sync_totals``,
``lockstep``, ``tokens_per_s``: pure functions of Runs (lab runs, or the recorded H200
profiles of ``recorded_h200``). ``sweep``, ``run_reporting``, ``engine_log`` and the
``*_study`` functions drive the lab.

Engine side: the step classes and the buffers they report into live in
``nbtools.claims.steps`` (re-exported here, so notebooks write ``X.DDPAccumStep``).

Notebooks now import ``nbtools.tutorial`` (the public module that re-exports these and
the rest of what a tutorial uses); this path stays for scripts and tests that import it.
This module only gathers them: the code lives in modules with one job each: nbtools/lab/sweeps.py
(sweeps and their tables), nbtools/analysis/counts.py (counts read off one run),
claims/studies.py (the per-claim studies that run a claims/steps.py step on the lab) and
claims/recorded.py (the shipped H200 profiles).
"""
from __future__ import annotations

from nbtools.claims.steps import (DDP_OPTIMIZER_LOG, CompileCacheStep, DDPAccumStep, DtypeProbeStep,
                          RankDivergenceStep)
from nbtools.claims.studies import (accumulation_study, backends_available, ddp_buckets, dtype_study,
                            engine_log, run_reporting, warmup_table)
from nbtools.analysis.counts import (collective_events, collectives, compile_signatures, compiled_regions,
                         graph_capture, lockstep, ranges, signatures_equal,
                         sync_counts, sync_totals, tokens_per_s)
from nbtools.claims.prose import mb, num, pct_vs, policy_lines, shown
from nbtools.claims.recorded import recorded_h200
from nbtools.lab.sweeps import (COLUMNS, compile_counts, rounds, speedup, spread, sweep, table,
                     varying_fields)
from nbtools.lab.ab import verdicts

# The notebooks' surface; listing it also tells pyflakes these imports are the point.
__all__ = [
    # claim_steps (engine side)
    "DDP_OPTIMIZER_LOG", "CompileCacheStep", "DDPAccumStep", "DtypeProbeStep",
    "RankDivergenceStep",
    # sweeps
    "COLUMNS", "sweep", "rounds", "varying_fields", "table", "spread", "compile_counts",
    "speedup", "verdicts",
    # run_counts
    "collective_events", "ranges", "collectives", "graph_capture", "sync_counts",
    "sync_totals", "lockstep", "compile_signatures", "signatures_equal", "tokens_per_s",
    "compiled_regions", "recorded_h200",
    # claim_studies
    "run_reporting", "engine_log", "ddp_buckets", "accumulation_study", "dtype_study",
    "warmup_table", "backends_available",
    # prose (no "nan" in a sentence or a shown cell)
    "pct_vs", "shown", "policy_lines", "num", "mb",
]
