"""A/B in interleaved rounds (``lab.ab``): both configs run round after round, ABBA, every run
kept in the history, and a Comparison whose ``.verdict`` says B over A with its interval."""
from __future__ import annotations

from nbtools.analysis import metrics
from nbtools.config.step_config import ConfigError, StepConfig
from nbtools.lab.sweeps import _run_one, in_rounds
from nbtools.results.comparison import Comparison


def ab(lab, a, b, rounds: int = 5, metric: str = "step_ms") -> Comparison:
    """Run ``a`` and ``b`` in ``rounds`` interleaved rounds (A B, B A, A B, ...) and compare
    them: ``cmp.verdict`` is B over A of the medians over rounds with a 95 % interval,
    resolved when it excludes 1. ``a``/``b``: StepConfigs, ``(workload_or_step, {fields})``
    or ``(workload_or_step, StepConfig)`` pairs, or ``lab.check(...)`` results. Both are
    checked before anything runs (ConfigError); a failed round is kept in the history and
    the verdict says it dropped it. 5 rounds resolve differences of a few percent where
    identical runs drift 8-30 % (2 x H200); 3 is the least that gives an interval."""
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ConfigError(f"rounds={rounds!r}: give a whole number >= 1 (5 resolves a few "
                          "percent; 3 is the least that gives an interval)")
    _check_metric(metric)
    ca, cb = lab.check(*_args(a, "a")), lab.check(*_args(b, "b"))
    todo = [("A " + ca.cfg.label(), ca), ("B " + cb.cfg.label(), cb)]
    runs: dict = {"A": [], "B": []}
    for k in range(rounds):
        for what, checked in in_rounds(todo, k):
            runs[what[0]].append(_run_one(lab, what, checked, f" round {k + 1}/{rounds}"))
    cmp = pair(runs["A"], runs["B"], metric)
    print(cmp.verdict.text)
    return cmp


def pair(runs_a: list, runs_b: list, metric: str = "step_ms") -> Comparison:
    """A Comparison of two lists of runs in round order (round k's run of A and of B): its
    A and B are each side's run nearest its median, for the tables and the timelines."""
    return Comparison(_typical(runs_a, metric), _typical(runs_b, metric), list(runs_a),
                      list(runs_b), metric)


def pair_from_runs(runs: list, metric: str = "step_ms") -> Comparison:
    """Runs of two configs in ABBA rounds (the CLI's ``run --repeats``): A is the config that
    ran first."""
    first = runs[0].config
    return pair([r for r in runs if r.config == first], [r for r in runs if r.config != first],
                metric)


def ab_of_runs(lab, run_a, run_b, rounds: int, workload=None) -> Comparison:
    """The panel's Compare with rounds > 1: the configs of two runs picked from the history,
    again in interleaved rounds (a custom step's runs with the panel's ``workload``)."""
    def side(run):
        if run.config is None:
            raise ConfigError(f"run {run.run_id} has no config to run again")
        if run.config.scenario == "custom":
            if workload is None:
                raise ConfigError(f"run {run.run_id} ran your own step: open the panel with "
                                  "it (lab.panel(workload)) to run it again in rounds")
            return (workload, run.config)
        return run.config
    return ab(lab, side(run_a), side(run_b), rounds=rounds)


def _args(x, name: str) -> tuple:
    if isinstance(x, tuple):
        if len(x) != 2:
            raise ConfigError(f"{name}: give a StepConfig or a (workload_or_step, {{fields}}) "
                              f"pair, not a tuple of {len(x)}")
        fn, fields = x
        if isinstance(fields, dict):
            return (fn, None) if not fields else (fn, StepConfig(scenario="custom").replace(
                **fields))
        if isinstance(fields, StepConfig) or fields is None:
            return (fn, fields)
        raise ConfigError(f"{name}: the second item of the pair is {type(fields).__name__}; "
                          "give a dict of StepConfig fields or a StepConfig")
    if x is None:
        raise ConfigError(f"{name}: give a StepConfig or a (workload_or_step, {{fields}}) pair")
    return (x,)


def _check_metric(metric: str) -> None:
    m = metrics.METRICS.get(metric)
    if m is None or not m.combine:
        known = ", ".join(n for n, v in metrics.METRICS.items() if v.better)
        raise ConfigError(f"metric={metric!r} is not a summary number; pick one of: {known}")


def _typical(runs: list, metric: str):
    ok = [r for r in runs if r.ok] or list(runs)
    vals = [metrics.combine(r.summary, metric, r.config) for r in ok]
    good = [(v, r) for v, r in zip(vals, ok) if v == v]
    if not good:
        return ok[0]
    good.sort(key=lambda vr: vr[0])
    return good[(len(good) - 1) // 2][1]


def compare_in_rounds(lab, a, b, rounds: int = 1, workload=None) -> Comparison:
    """Two runs picked from the history (ids or Runs): ``rounds`` 1 compares them as they are
    (lab.compare: a verdict from their steps, no drift covered); more runs their configs again
    in that many ABBA rounds (lab.ab) and compares those."""
    if rounds == 1:
        return lab.compare(a, b)
    run_a, run_b = (x if not isinstance(x, str) else lab.history[x] for x in (a, b))
    return ab_of_runs(lab, run_a, run_b, rounds, workload)


def verdicts(runs: list, metric: str = "step_ms", baseline=None):
    """Runs of several configs made in rounds (``rounds``/``sweep(repeats=)``): each config's
    verdict against ``baseline`` (default: the config that ran first), paired by round
    (config c's k-th run with the baseline's k-th). One row per other config: its varying
    fields, ratio (B over A), low, high, resolved, rounds, text."""
    import pandas as pd
    from nbtools.lab.sweeps import _by_config, varying_fields
    groups = _by_config(runs)
    base = next((g for g in groups if g[0].config == baseline), groups[0]) if groups else []
    fields = varying_fields(runs)
    rows = []
    for g in groups:
        if g is base:
            continue
        n = min(len(g), len(base))
        v = pair(base[:n], g[:n], metric).verdict
        rows.append({**{f: getattr(g[0].config, f) for f in fields},
                     **{k: x for k, x in v.to_dict().items() if k != "metric"}})
    return pd.DataFrame(rows)
