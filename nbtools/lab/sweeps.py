"""Sweeps over configs and their one-row-per-run tables: what a claim notebook prints.

``sweep`` drives the lab (one run per combination of field values, optionally repeated);
``table``, ``spread``, ``compile_counts`` and ``speedup`` are pure functions of Runs. Columns ``table`` computes
rather than reads come from ``run_counts``.
"""
from __future__ import annotations

import numbers
import time

import numpy as np
import pandas as pd

from nbtools.config.grid import grid
from nbtools.config.step_config import ConfigError, StepConfig
from nbtools.lab.keep_going import run_or_keep
from nbtools.lab.progress_view import clear_line
from nbtools.analysis import metrics
from nbtools.analysis.counts import ItemsNotReported, collectives, tokens_per_s
from nbtools.common.units import fmt_number

COLUMNS = metrics.TABLE


def sweep(lab, base: StepConfig, rounds: int = 1, *, repeats=None, **field_values) -> list:
    """One run per combination of the given fields' values (cross product, in the order
    given), e.g. ``sweep(lab, cfg, compile=["off", "default"], batch=[1, 8])``.

    ``rounds`` > 1 runs the cross product in that many mirrored rounds (each combination
    twice a round: A B C, then C B A), so a drift of the machine lands on every config
    alike (``round_order``); ``spread(runs)`` then says how far identical runs are apart
    (on 2 × H200, 8-30 % between runs minutes apart: docs/findings.md §4) and
    ``verdicts(runs)`` judges each config against the first. A combination the config or
    the lab rejects is skipped with the reason printed, before anything runs; a run that
    fails is kept (its Run has the errors) and the sweep goes on."""
    rounds = _rounds_arg(rounds, repeats, "sweep")
    todo = []
    for change, checked in grid(base, field_values, check=lab.check):
        if isinstance(checked, ConfigError):
            print(f"skipped {change}: {checked}")
        else:
            todo.append((_describe(change), checked))
    return _in_rounds(lab, todo, rounds)


def rounds(lab, configs, rounds: int = 1, *, repeats=None) -> list:
    """Run ``configs`` in order, in ``rounds`` mirrored rounds (see ``round_order``), with
    ``sweep``'s handling of failures; ``table(runs, ..., combine=True)`` or ``spread(runs)``
    then reduce identical configs, ``verdicts(runs)`` judges each against the first. A
    config the lab rejects raises ConfigError before anything runs."""
    n = _rounds_arg(rounds, repeats, "rounds")
    return _in_rounds(lab, [(cfg.label(), lab.check(cfg)) for cfg in configs], n)


def _rounds_arg(rounds, repeats, where: str) -> int:
    """``rounds``, or the old spelling ``repeats`` (said once per process, still obeyed)."""
    if repeats is not None:
        import warnings
        warnings.warn(f"{where}(repeats=N) is now {where}(rounds=N)", FutureWarning,
                      stacklevel=3)
        rounds = repeats
    return check_rounds(rounds)


MAX_ROUNDS = 100


def check_rounds(rounds, name: str = "rounds") -> int:
    """A whole number of rounds, 1..MAX_ROUNDS (numpy integers too), or ConfigError naming
    the argument (``name``)."""
    if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral):
        raise ConfigError(f"{name}={rounds!r}: give a whole number of rounds, e.g. 5 "
                          "(6 or more need no assumption on the noise's shape)")
    if not 1 <= int(rounds) <= MAX_ROUNDS:
        raise ConfigError(f"{name}={rounds!r}: give a whole number from 1 to {MAX_ROUNDS} "
                          "(each round runs every config twice; 5 resolve a few percent)")
    return int(rounds)


def _in_rounds(lab, todo, rounds: int) -> list:
    if rounds == 1:     # one pass, nothing to pair: one run each
        return [run_one(lab, what, checked, "") for what, checked in todo]
    return [run_one(lab, what, checked, f" round {k + 1}/{rounds}")
            for k in range(rounds) for what, checked in round_order(todo)]


def round_order(todo: list) -> list:
    """One round: every config in the order given, then in reverse (A B B A; A B C C B A).
    A drift of the machine that is linear over the round (warming up, a neighbour job
    starting) then lands on every config equally and cancels in their ratios, whatever the
    number of rounds; the rounds' own differences (clocks, other jobs) cancel in each
    round's ratio. The one way rounds run here: sweeps, ``rounds``, ``lab.ab``, the CLI."""
    return list(todo) + list(reversed(todo))


def run_one(lab, what: str, checked, tag: str, timeout=None, echo: bool = True):
    """One run of a sweep or of a round (a failed one kept, see ``run_or_keep``); with
    ``echo``, one line: ``tag``, ``what`` and its step time or its error (none from a quiet
    lab: ``Lab(echo=False)`` or ``lab.progress = False``)."""
    t = time.perf_counter()
    run = run_or_keep(lab, checked, timeout=timeout)
    if echo and getattr(lab, "echo", True) and getattr(lab, "progress", True) is not False:
        s = run.summary
        step = metrics.combine(s, "step_ms", run.config) if run.ok else float("nan")
        ms = f", {fmt_number(step)} ms/step" if step == step else ""
        clear_line()          # a terminal's progress line makes way for the result
        print(f"{what}{tag}: {run.status}{ms} ({time.perf_counter() - t:.1f} s)", flush=True)
    return run


def _describe(change: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in change.items()) or "base"


def varying_fields(runs) -> list:
    """The config fields whose value differs between the runs."""
    cfgs = [r.config for r in runs if r.config is not None]
    if len(cfgs) < 2:
        return []
    d = cfgs[0].to_dict()
    return [k for k in d if any(c.to_dict()[k] != d[k] for c in cfgs[1:])]


def _field(cfg, name):
    """A config field's value for a table; the backend of an eager run is "-"."""
    if cfg is None:
        return None
    if name == "backend" and not cfg.compiled:
        return "-"
    return getattr(cfg, name)


def table(runs, columns=COLUMNS, per_rank: bool = False, fields=None,
          combine: bool = False) -> pd.DataFrame:
    """One row per run (or per run and rank): the config fields that vary between the runs
    (or ``fields``), then ``columns`` from each summary, its ranks combined as every other
    surface combines them (analysis.metrics.combine: the slowest rank for times, the
    largest for counts and memory, throughput over the slowest rank's step, the mean for
    a step's breakdown and shares; ``metrics.how(column)`` says it in words). Computed
    columns (not per rank): ``tokens_per_s`` and ``padding_pct`` (real tokens, see
    tokens_per_s), ``n_<kind>`` (compile events of that kind, e.g. n_limit_hit) and
    ``<kind>_per_step`` (collectives, e.g. all_reduce_per_step). Missing columns are NaN.

    A part of the profiled step (compute_ms, comm_ms, exposed_comm_ms, idle_ms, memcpy_ms)
    comes with profiled_window_ms, the whole it fits in, right before it.

    ``combine=True`` (runs repeated with ``rounds``/``sweep(rounds=)``): one row per
    distinct config, each column the median over its successful runs (a count: the most
    any run had, so it stays whole), with ``n`` (runs
    combined) and ``step_ms_range_pct`` (how far its runs' step_ms lay apart)."""
    runs = [runs] if not isinstance(runs, (list, tuple)) else list(runs)
    # a step's parts come with the window they fit in, right before them (never beside
    # step_ms alone: a median of other steps, which the parts' means can exceed)
    columns = metrics.beside_whole(columns, metrics.METRICS)
    if combine:
        return _combined(runs, list(columns), fields)
    fields = varying_fields(runs) if fields is None else list(fields)
    rows = []
    for run in runs:
        head = {f: _field(run.config, f) for f in fields}
        head["run"] = run.run_id
        s = run.summary
        if per_rank and len(s):
            for _, r in s.iterrows():
                rows.append({**head, "rank": int(r["rank"]),
                             **{c: r[c] if c in s else np.nan for c in columns}})
            continue
        row = dict(head)
        for c in columns:
            if c in _DERIVED or c.startswith("n_") or c.endswith("_per_step"):
                row[c] = _derived(run, c) if run.ok else np.nan
                continue
            row[c] = metrics.combine(s, c, run.config)
        row["status"] = run.status
        row["flags"] = "; ".join(run.flags)
        rows.append(row)
    return counts_as_ints(pd.DataFrame(rows))


def counts_as_ints(df: pd.DataFrame) -> pd.DataFrame:
    """Counts (compiles, recompiles, graphs, n_<kind>, ...) print as 3, not 3.0: a count
    column whose values are all whole numbers becomes int (one with a NaN stays float)."""
    for c in df.columns:
        count = metrics.is_count(c) or c.startswith("n_")
        if count and pd.api.types.is_float_dtype(df[c]):
            v = df[c]
            if len(v) and v.notna().all() and (v == v.round()).all():
                df[c] = v.astype(np.int64)
    return df


def group_by_config(runs) -> list:
    """Runs grouped by identical config, in first-seen order."""
    groups: dict = {}
    for run in runs:
        key = tuple(sorted(run.config.to_dict().items())) if run.config else run.run_id
        groups.setdefault(key, []).append(run)
    return list(groups.values())


def _range_pct(v: pd.Series) -> float:
    return 100 * (v.max() - v.min()) / v.median()


def _combined(runs, columns, fields) -> pd.DataFrame:
    fields = varying_fields(runs) if fields is None else list(fields)
    rows = []
    for same in group_by_config(runs):
        ok = [r for r in same if r.ok] or same
        t = table(ok, columns, fields=fields)
        row = {f: t[f].iloc[0] for f in fields}
        # counts stay whole: the most any run had (a median of 0 and 3 compiles read 1.5)
        row.update({c: getattr(pd.to_numeric(t[c], errors="coerce"),
                               "max" if metrics.is_count(c) else "median")() for c in columns})
        row["n"] = len(ok) if ok[0].ok else 0
        if "step_ms" in t:
            row["step_ms_range_pct"] = _range_pct(pd.to_numeric(t["step_ms"], errors="coerce"))
        row["status"] = "ok" if all(r.ok for r in same) else \
            f"{sum(r.ok for r in same)}/{len(same)} ok"
        row["flags"] = "; ".join(dict.fromkeys(f for r in same for f in r.flags))
        rows.append(row)
    return counts_as_ints(pd.DataFrame(rows))


# Columns ``table`` computes rather than reads from the summary (any ``n_<kind>`` of compile
# event and ``<collective>_per_step`` too).
_DERIVED = ("tokens_per_s", "steady_tokens_per_s", "padding_pct")


def _derived(run, c: str) -> float:
    if c in _DERIVED:
        try:
            tok = tokens_per_s(run)
        except ItemsNotReported:    # a run saved before ranks reported their items: NaN
            return np.nan
        if c == "padding_pct":
            return metrics.combine(tok, c, run.config)
        # each rank's rate over its own step time (mean for the epoch's view, median for the
        # steady one): combined as every rate is, over the slowest rank's step (metrics.py)
        own = tok["mean_step_ms" if c == "tokens_per_s" else "median_step_ms"]
        return metrics.combine(tok[[c]].assign(step_ms=own), c, run.config)
    if c.startswith("n_"):        # compile events of one kind, largest count over ranks
        ce = run.compile_events
        n = ce[ce["kind"] == c[2:]].groupby("rank").size() if len(ce) else pd.Series(dtype=int)
        return float(n.max()) if len(n) else 0.0
    col = collectives(run)        # <kind>_per_step: mean over ranks and profiled steps
    kind = c[:-len("_per_step")]
    return float(col[kind].mean()) if kind in col else 0.0


def spread(runs, column: str = "step_ms", fields=None) -> pd.DataFrame:
    """Identical configs run more than once (``sweep(..., rounds=N)``): per config, the
    median over its runs of ``column`` (each run reduced over ranks as in ``table``), the
    lowest and highest, ``range_pct`` = (max - min) / median and ``n`` runs. A difference
    between configs smaller than their range_pct is not resolved by these runs."""
    ok = [r for r in runs if r.ok]
    fields = varying_fields(ok) if fields is None else list(fields)
    rows = []
    for same in group_by_config(ok):
        t = table(same, [column], fields=fields)
        v = pd.to_numeric(t[column], errors="coerce")
        head = {f: t[f].iloc[0] for f in fields} or {"config": "all"}  # one config only
        rows.append({**head, "median": v.median(), "min": v.min(), "max": v.max(),
                     "n": len(same), "range_pct": _range_pct(v)})
    return pd.DataFrame(rows)


def compile_counts(runs, kinds=None) -> pd.DataFrame:
    """One row per run: the varying config fields, then ``n_<kind>``: how many compile
    events of each kind the run had (compile, recompile, graph_break, limit_hit,
    cudagraph_record, cudagraph_rerecord, cudagraph_skip, ...; the largest count over
    ranks). ``kinds`` picks the kinds (default: every kind any of the runs had)."""
    runs = [runs] if not isinstance(runs, (list, tuple)) else list(runs)
    kinds = kinds or sorted({k for r in runs for k in r.compile_events["kind"].astype(str)})
    return table(runs, [f"n_{k}" for k in kinds]).drop(columns=["status", "flags"])


def speedup(base_runs, new_runs, on: str = "batch", names=("eager", "graphs")) -> pd.DataFrame:
    """Pair runs that share ``on`` (e.g. batch): step_ms of each (slowest rank) and
    base / new (> 1: the new one is faster)."""
    a = table(base_runs, ["step_ms"], fields=[on]).set_index(on)["step_ms"]
    b = table(new_runs, ["step_ms"], fields=[on]).set_index(on)["step_ms"]
    out = pd.DataFrame({f"{names[0]}_ms": a, f"{names[1]}_ms": b})
    out["speedup"] = out[f"{names[0]}_ms"] / out[f"{names[1]}_ms"]
    return out.reset_index()
