"""Client side: what a sweep of a model through the strategies reads off its runs (notebook
06, benchmarks/gpu/models.sh): MFU against the device's datasheet peak, the eager-check
difference, one row per run. Pure functions of Runs."""
from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd

from nbtools.analysis.card import peak_tflops
from nbtools.analysis.counts import collectives
from nbtools.common.units import fmt_column
from nbtools.analysis.metrics import combine
from nbtools.lab.keep_going import run_or_keep
from nbtools.lab.sweeps import table as _table

COLUMNS = ("step_ms", "items_per_s", "tflops", "compile_s", "graphs", "graph_breaks",
           "peak_mem_mb", "rss_mb", "exposed_comm_ms")


def run_all(lab, workload, configs) -> list:
    """``lab.run(workload, cfg)`` for each config, in order. A failed run (RunFailed) is
    kept, its first error line printed, and the next config runs: one strategy that fails
    on this model does not hide the others' numbers. A ConfigError stops the cell before
    the first run (every config is checked first)."""
    runs = []
    for checked in [lab.check(workload, cfg) for cfg in configs]:
        label = checked.cfg.label()
        runs.append(run_or_keep(lab, checked, lambda e: print(
            f"{label}: failed - {str(e).splitlines()[0][:300]}")))
    return runs


def mfu(run) -> pd.Series:
    """Per-rank MFU (0..1): the summary's tflops (the workload's FLOPs per step over the
    step time) over the peak of the ranks' GPU in the autocast dtype (fp32 when autocast
    is off). NaN on CPU ranks."""
    dtype = run.config.autocast if run.config.autocast != "off" else "fp32"
    peak = peak_tflops(run.env.get("gpu", ""), dtype)
    return run.summary.set_index("rank")["tflops"] / peak


def run_mfu(run) -> float:
    """The run's MFU (0..1) per GPU: its TFLOP/s as every surface combines them (all ranks'
    FLOPs per step over the slowest rank's step, analysis/metrics.py) over the peak of all
    its GPUs. The mean of the ranks' own MFU counted a rank's shorter median as work it
    could not do while it waited for the others."""
    dtype = run.config.autocast if run.config.autocast != "off" else "fp32"
    peak = peak_tflops(run.env.get("gpu", ""), dtype)
    return combine(run.summary, "tflops", run.config) / (peak * max(1, len(run.summary)))


def check_rel(run) -> float:
    """The largest relative difference from eager over the ranks (check=True), NaN without."""
    vals = [c["max_rel"] for c in (v.get("check") for v in run.ranks.values()) if c]
    return max(vals) if vals else float("nan")


def table(runs, columns=COLUMNS, fields=("parallel", "compile", "autocast")) -> pd.DataFrame:
    """One row per run: the config fields, the model (its Workload's name), ``columns`` as
    sweeps.table combines them over ranks (analysis/metrics.py), ``mfu_pct`` (``run_mfu``:
    per GPU) and
    ``check_rel`` (largest relative difference from eager)."""
    runs = list(runs)
    t = _table(runs, columns, fields=list(fields))
    t.insert(0, "model", [_model(r) for r in runs])
    t["mfu_pct"] = [100 * run_mfu(r) if r.ok else np.nan for r in runs]
    t["check_rel"] = [check_rel(r) for r in runs]
    return t


def styled(t: pd.DataFrame):
    """``table(...)`` as the notebooks show a table: columns named as the CLI and the panel
    name them (units in the name), numbers rounded per unit, columns nothing was measured
    for (GPU-only ones on CPU ranks) left out, a failed run's status on one short line, no
    index. The DataFrame itself stays for code (``table``)."""
    from nbtools.analysis.metrics import METRICS, unit
    t = t.dropna(axis=1, how="all").copy()
    if "status" in t:
        t["status"] = [str(s).strip().splitlines()[0][:60] if str(s).strip() else ""
                       for s in t["status"]]
    names, fmt = {}, {}
    for c in t.columns:
        if c in METRICS:
            # digits per unit, as the CLI shows them (a notebook table: no 69.623705)
            names[c] = METRICS[c].label
            fmt[names[c]] = partial(fmt_column, unit=unit(c))
        elif c == "mfu_pct":
            names[c], fmt["mfu%"] = "mfu%", partial(fmt_column, unit="%")
        elif c == "check_rel":
            names[c], fmt["check_rel"] = "check_rel", "{:.1e}"
    t = t.rename(columns=names)
    return (t.style.format(fmt, na_rep="-").hide(axis="index")
            .set_table_styles([{"selector": "td, th", "props": "white-space: nowrap"}]))


def collectives_per_step(run, rank: int = 0) -> pd.Series:
    """Collectives per profiled step on ``rank``, by kind (all_reduce, all_gather,
    reduce_scatter, ...): what shows the strategy ran. Empty for a run with none."""
    c = collectives(run)
    if not len(c):
        return pd.Series(dtype=float)
    return c[c["rank"] == rank].drop(columns=["rank", "step"]).mean()


def _model(run) -> str:
    notes = (run.ranks.get(0) or {}).get("notes") or []
    head = next((n for n in notes if n.startswith("workload ")), "")
    return head[len("workload "):].split(":")[0] if head else run.config.scenario
