"""A/B in rounds (``lab.ab``): both configs run round after round, each round A B B A, every
run kept in the history, and a Comparison whose ``.verdict`` says B over A with its
interval. Stopped, interrupted or failing part-way, it returns the rounds that finished."""
from __future__ import annotations

import time

import numpy as np
from typing import Callable, Optional

from nbtools.analysis.verdict import EQUIVALENCE
from nbtools.config.step_config import ConfigError, StepConfig
from nbtools.lab.ab_options import FIRST_LOOK, ABOptions, check_metric
from nbtools.lab.sweeps import run_one, round_order
from nbtools.results.comparison import Comparison

PER_ROUND = 2       # runs of each side in a round: A B B A


def ab(lab, a, b, rounds=5, metric: str = "step_ms", *, timeout=None,
       on_run: Optional[Callable[[dict], None]] = None, stop=None, max_rounds: int = 12,
       width: Optional[float] = None, equivalence: Optional[float] = EQUIVALENCE) -> Comparison:
    """Run ``a`` and ``b`` in ``rounds`` rounds of A B B A and compare them: ``cmp.verdict``
    is B over A (geometric means) with a 95 % interval from the rounds' ratios, resolved
    when it excludes 1 (analysis/verdict.py). ``a``/``b``: StepConfigs,
    ``(workload_or_step, {fields})`` or ``(workload_or_step, StepConfig)`` pairs, or
    ``lab.check(...)`` results. Both are checked before anything runs (ConfigError), and
    so is every option (lab/ab_options.py's ABOptions).

    ``timeout`` bounds each run (seconds; default the lab's). ``on_run(event)`` is called
    before and after every run with a dict: ``round``, ``rounds``, ``side`` ("A"/"B"),
    ``index`` (1-based run number), ``of`` (runs in all), ``phase`` ("start"/"done"),
    ``run`` (the Run when done), ``elapsed_s``; with it, nothing is printed. ``stop``: an
    object with ``is_set()`` (threading.Event) checked before each run: once set, the
    rounds end there.

    A failed run stays in the history and its round is dropped from the verdict (said).
    Ctrl-C, ``stop`` or an error part-way returns the Comparison of the rounds that
    finished, its verdict saying so (nothing finished: the error is raised). 5 rounds
    resolve differences of a few percent where identical runs drift 8-30 % (2 x H200);
    below 6 the interval assumes the noise is roughly log-normal.

    ``rounds="auto"``: as many rounds as it takes, up to ``max_rounds``: after every round
    from the third it looks at the verdict and stops once it is resolved, or once the
    interval is narrower than ``width`` (e.g. 0.04: high / low below 1.04, "no difference
    bigger than that"). Each look's interval is widened so that stopping at the first
    resolved look still calls at most 5 % of identical configs resolved (simulated in
    tests/analysis/test_verdict.py); the text says how many rounds it took.

    ``equivalence`` (default analysis/verdict.py's EQUIVALENCE, 0.02): the difference that
    does not matter. A verdict whose whole interval lies within +-2 % says "no difference
    bigger than 2 %" (``equivalent``), and rounds="auto" stops there too: more rounds
    cannot make such a change matter. None: no bound."""
    return run_ab(lab, a, b, ABOptions(rounds=rounds, max_rounds=max_rounds, metric=metric,
                                       width=width, equivalence=equivalence, timeout=timeout,
                                       on_run=on_run, stop=stop))


def run_ab(lab, a, b, o: ABOptions) -> Comparison:
    """lab.ab with its options made and checked (``o``): the sides are checked, the
    options are not again (lab.explore makes one ABOptions and derives each A/B's)."""
    rounds, metric, on_run, stop = o.most, o.metric, o.on_run, o.stop
    looks = rounds - FIRST_LOOK + 1 if o.auto else 1
    ca, cb = lab.check(*_args(a, "a")), lab.check(*_args(b, "b"))
    order = round_order([("A", ca), ("B", cb)])
    runs: dict = {"A": [], "B": []}
    done_rounds, note, t0 = 0, "", time.perf_counter()
    try:
        for k in range(rounds):
            for i, (side, checked) in enumerate(order):
                if stop is not None and stop.is_set():
                    raise _Stopped
                index = k * len(order) + i + 1
                event = dict(round=k + 1, rounds=rounds, side=side, index=index,
                             of=rounds * len(order), config=checked.cfg)
                if on_run is not None:
                    on_run(dict(event, phase="start", run=None,
                                elapsed_s=time.perf_counter() - t0))
                run = run_one(lab, f"{side} {checked.cfg.label()}", checked,
                               f" round {k + 1}/{rounds}", o.timeout, echo=on_run is None)
                runs[side].append(run)
                if on_run is not None:
                    on_run(dict(event, phase="done", run=run,
                                elapsed_s=time.perf_counter() - t0))
            done_rounds = k + 1
            if o.auto and done_rounds >= FIRST_LOOK:
                v = Comparison.from_rounds(runs["A"], runs["B"], metric, looks=looks,
                                           per_round=PER_ROUND, bound=o.equivalence).verdict
                if v.resolved or v.equivalent or (o.width is not None and np.isfinite(v.low)
                                                  and v.high / v.low < 1 + o.width):
                    break
    except _Stopped:
        note = f"stopped after {done_rounds} of {rounds} rounds"
    except KeyboardInterrupt:
        note = f"interrupted (Ctrl-C) after {done_rounds} of {rounds} rounds"
    except Exception as e:  # noqa: BLE001 - the finished rounds are what the person keeps
        if not runs["A"] or not runs["B"]:
            raise
        note = (f"ended after {done_rounds} of {rounds} rounds by {type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}")
    if not runs["A"] or not runs["B"]:
        said = f"lab.ab: {note} before both sides ran; nothing to compare (the runs made " \
            "are in lab.history)"
        raise KeyboardInterrupt(said) if note.startswith("interrupted") else RuntimeError(said)
    return Comparison.from_rounds(runs["A"], runs["B"], metric, rounds=done_rounds, note=note,
                                  looks=looks, per_round=PER_ROUND, bound=o.equivalence)


class _Stopped(Exception):
    """stop was set: end the rounds where they are."""


def compare(lab, a, b, rounds: int = 1, metric: str = "step_ms", workload=None,
            **kw) -> Comparison:
    """Lab.compare: two runs (Runs or history ids). ``rounds`` 1 compares them as they are
    (a verdict from their steps, no drift covered); more runs their configs again in that
    many A B B A rounds (ab) and compares those; a custom step's runs need its
    ``workload``. ``kw`` are ab's options (on_run, stop, timeout, ...)."""
    from nbtools.lab.arguments import resolve_run
    run_a, run_b = resolve_run(lab, a, "a"), resolve_run(lab, b, "b")
    if rounds == 1:
        check_metric(metric)
        return Comparison(run_a, run_b, metric=metric)

    def side(run):
        if run.config is None:
            raise ConfigError(f"run {run.run_id} has no config to run again")
        if run.config.scenario == "custom":
            if workload is None:
                raise ConfigError(f"run {run.run_id} ran your own step: give it "
                                  "(lab.compare(a, b, rounds, workload=...), or open the "
                                  "panel with it: lab.panel(workload)) to run it again")
            return (workload, run.config)
        return run.config
    o = ABOptions(rounds=rounds, metric=metric, **kw)
    return run_ab(lab, side(run_a), side(run_b), o)


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


def verdicts(runs: list, metric: str = "step_ms", baseline=None):
    """Runs of several configs made in rounds (``rounds``/``sweep(rounds=)``): each config's
    verdict against ``baseline`` (default: the config that ran first), round by round (a
    config's two runs of round k against the baseline's two). One row per other config: its
    varying fields, ratio (B over A), low, high, resolved, rounds, text."""
    import pandas as pd
    from nbtools.lab.sweeps import group_by_config, varying_fields
    groups = group_by_config(runs)
    base = next((g for g in groups if g[0].config == baseline), groups[0]) if groups else []
    fields = varying_fields(runs)
    rows = []
    for g in groups:
        if g is base:
            continue
        v = Comparison.from_rounds(base, g, metric, per_round=PER_ROUND,
                                   bound=EQUIVALENCE).verdict
        rows.append({**{f: getattr(g[0].config, f) for f in fields},
                     **{k: x for k, x in v.to_dict().items() if k != "metric"}})
    return pd.DataFrame(rows)
