"""The tutorial notebooks' toolkit: everything a notebook uses beyond ``from nbtools import ...``.

A notebook writes ``from nbtools import Lab, StepConfig, tutorial as X`` and then
``X.sweep(...)``, ``X.table(runs)``, ``X.explain(fn, *args)``. Each name is re-exported from
the module whose job it is; ``help(X.name)`` shows its own docstring. The groups:

Sweeps and verdicts (the lab drives them; tables of one row per run)
    ``sweep``, ``rounds``, ``table``, ``speedup``, ``spread``, ``varying_fields``,
    ``compile_counts``, ``verdicts``, ``COLUMNS``.
Counts read off one run's timeline (pure functions of a Run)
    ``collectives``, ``collective_events``, ``ranges``, ``graph_capture``, ``sync_counts``,
    ``sync_totals``, ``lockstep``, ``compile_signatures``, ``signatures_equal``,
    ``compiled_regions``, ``tokens_per_s``; and over a run's events table:
    ``collective_skew`` (who arrived last at each collective), ``top_kernels``.
Claims that need their own step (engine-side classes; they travel to the ranks)
    ``DDPAccumStep``, ``DtypeProbeStep``, ``RankDivergenceStep``, ``CompileCacheStep``,
    ``DDP_OPTIMIZER_LOG``; the studies that run them: ``accumulation_study``,
    ``dtype_study``, ``ddp_buckets``, ``warmup_table``, ``run_reporting``, ``engine_log``,
    ``backends_available``.
Graphs and breaks without a lab
    ``explain`` (``torch._dynamo.explain`` in a separate process), ``TinyLM`` (the small
    language model of the built-in scenarios, to explain or to run by hand).
Real models (the ``models`` extra) and their sweeps (notebook 06)
    ``llama``, ``resnet50``, ``LLAMA_TINY``, ``LLAMA_1B``, ``LLAMA_TP_PLAN``; ``run_all``
    (each config in turn, a failed one kept), ``model_table`` (one row per run with MFU),
    ``styled``, ``collectives_per_step``.
Recorded profiles and prose
    ``recorded_h200`` (the shipped H200 runs), ``num``, ``count``, ``mb``, ``pct_vs``, ``shown``,
    ``policy_lines`` (numbers in sentences: no "nan" in a sentence or a shown cell).

Importing this module does not import torch: ``TinyLM`` loads it on first use.
"""
from __future__ import annotations

from nbtools.analysis.counts import (collective_events, collectives, compile_signatures,
                                     compiled_regions, graph_capture, lockstep, ranges,
                                     signatures_equal, sync_counts, sync_totals, tokens_per_s)
from nbtools.analysis.step_metrics import collective_skew, top_kernels
from nbtools.claims.model_sweep import collectives_per_step, run_all, styled
from nbtools.claims.model_sweep import table as model_table
from nbtools.claims.prose import count, mb, num, pct_vs, policy_lines, shown
from nbtools.claims.recorded import recorded_h200
from nbtools.engine.claim_steps import (DDP_OPTIMIZER_LOG, CompileCacheStep, DDPAccumStep,
                                  DtypeProbeStep, RankDivergenceStep)
from nbtools.claims.studies import (accumulation_study, backends_available, ddp_buckets,
                                    dtype_study, engine_log, run_reporting, warmup_table)
from nbtools.engine.explain import explain
from nbtools.lab.ab import verdicts
from nbtools.lab.sweeps import (COLUMNS, compile_counts, rounds, speedup, spread, sweep, table,
                                varying_fields)
from nbtools.models import LLAMA_1B, LLAMA_TINY, LLAMA_TP_PLAN, llama, resnet50

__all__ = [
    "sweep", "rounds", "table", "speedup", "spread", "varying_fields", "compile_counts",
    "verdicts", "COLUMNS",
    "collectives", "collective_events", "ranges", "graph_capture", "sync_counts", "sync_totals",
    "lockstep", "compile_signatures", "signatures_equal", "compiled_regions", "tokens_per_s",
    "collective_skew", "top_kernels",
    "DDPAccumStep", "DtypeProbeStep", "RankDivergenceStep", "CompileCacheStep",
    "DDP_OPTIMIZER_LOG", "accumulation_study", "dtype_study", "ddp_buckets", "warmup_table",
    "run_reporting", "engine_log", "backends_available",
    "explain", "TinyLM",
    "llama", "resnet50", "LLAMA_TINY", "LLAMA_1B", "LLAMA_TP_PLAN", "run_all", "model_table",
    "styled", "collectives_per_step",
    "recorded_h200", "num", "count", "mb", "pct_vs", "shown", "policy_lines",
]


def __getattr__(name):
    # TinyLM is an nn.Module: importing it imports torch, which the rest of this module avoids.
    if name == "TinyLM":
        from nbtools.engine.scenarios import TinyLM
        return TinyLM
    raise AttributeError(f"module 'nbtools.tutorial' has no attribute {name!r}")
