"""lab.explore: from a run's advice to A/Bs that prove or refute it. Run the start config
once, advise it, and try each suggestion that changes a StepConfig field as an A/B (lab.ab,
interleaved rounds) of the best so far against best + change; a change resolved faster is
kept, and the new best's run is advised again, so changes combine greedily. Within a wall
budget, checked before each A/B with an estimate from the runs so far. Every run stays in
the history; a failing change is recorded and skipped; Ctrl-C or ``stop`` returns what
finished."""
from __future__ import annotations

import math
import time
from typing import Callable, Optional

from nbtools.analysis.advice import valid_change
from nbtools.config.step_config import ConfigError, StepConfig
from nbtools.config.workload import Workload, patch_text, with_model_patch
from nbtools.lab import ab as ab_rounds
from nbtools.lab.keep_going import run_or_keep
from nbtools.lab.live_line import LiveLine
from nbtools.results.exploration import (GONE, IN_YOUR_CODE, KEPT, NOT_FASTER,
                                         OVER_BUDGET, Exploration, change_text)


def explore(lab, target, start=None, budget_s: float = 600, rounds=5, *, max_rounds: int = 12,
            width: Optional[float] = None, also=(), timeout=None,
            on_step: Optional[Callable[[dict], None]] = None,
            on_run: Optional[Callable[[dict], None]] = None, stop=None) -> Exploration:
    """Lab.explore: run ``start`` once, advise it, and try each suggestion that changes a
    field (or carries a model patch) as an A/B (lab.ab: ``rounds`` of A B B A, "auto"
    allowed) of the best so far against best + change; keep it when B is resolved faster
    and re-advise the new best's run (changes combine greedily). ``target``: a Workload, a
    step function (``start``: its StepConfig or a dict of fields) or a StepConfig. Stops
    when the suggestions or ``budget_s`` (wall seconds, checked before each A/B against an
    estimate from the runs so far) run out. ``also=[{fields}]``: changes to try beside the
    advice; ``on_step(row)`` per A/B; ``on_run``, ``stop``, ``timeout``, ``max_rounds``,
    ``width`` as in lab.ab. Every run stays in the history; a failing change is recorded
    and skipped; Ctrl-C returns what finished."""
    fn, start = _target(target, start)
    budget_s = _budget(budget_s)
    extra = _also(also)
    if not (isinstance(rounds, str) and rounds == "auto"):
        ab_rounds.check_rounds(rounds)
    lab.check(fn, start) if fn is not None else lab.check(start)   # ConfigError before a run
    t0 = time.perf_counter()
    ex = Exploration(start=start, best=start, workload=fn, best_workload=fn, budget_s=budget_s)
    line = None if on_step is not None else LiveLine(lab)
    run_s: list = []            # wall seconds of each run so far: the budget's estimate
    try:
        with (line or _Null()):
            t = time.perf_counter()
            if line:
                line.say(f"explore: running the start config ({start.label()})")
            first = run_or_keep(lab, lab.check(fn, start) if fn is not None else lab.check(start))
            run_s.append(time.perf_counter() - t)
            if not first.ok:
                from nbtools.lab.errors import RunFailed
                raise RunFailed(f"explore: the start config failed, nothing to advise: "
                                f"{_first_error(first)}", first)
            ex.start_run = first
            _loop(lab, ex, fn, first, extra, rounds, max_rounds, width, timeout, stop,
                  on_step, on_run, line, run_s, t0)
    except KeyboardInterrupt:
        ex.note = ex.note or (f"interrupted (Ctrl-C) after {_abs(ex)} A/B(s): what finished "
                              "is kept")
    ex.elapsed_s = time.perf_counter() - t0
    return ex          # the caller shows it (its repr and HTML carry the verdict)


def _loop(lab, ex, fn, first, extra, rounds, max_rounds, width, timeout, stop, on_step,
          on_run, line, run_s, t0) -> None:
    seen: set = set()
    # lab.advise, not advise: a run on warm engines reused its graphs, and lab.advise adds
    # the findings of the run that compiled them
    queue = _suggested(lab.advise(first), seen) + [(None, c) for c in extra if _new(c, seen)]
    budget_out = False
    while queue:
        s, change = queue.pop(0)
        # a fix in the person's code is tried on their model when the suggestion says how
        # (a model patch such as HF's config.use_cache); otherwise it is theirs to make
        patch = dict(s.model_patch) if s is not None and not change else {}
        row = _row(s, change, patch)
        if not change and not patch:
            _add(ex, row, IN_YOUR_CODE, on_step)
            continue
        if patch and not isinstance(ex.best_workload, Workload):
            _add(ex, row, IN_YOUR_CODE + " (a step function's model is out of the lab's "
                 "reach)", on_step)
            continue
        bad = valid_change(ex.best, change)
        if bad:
            _add(ex, row, f"not valid: {bad}", on_step)
            continue
        cand = ex.best.replace(**change)
        if cand == ex.best and not patch:
            _add(ex, row, "already in the best config", on_step)
            continue
        wl = with_model_patch(ex.best_workload, patch) if patch else ex.best_workload
        try:
            a, b = _side(ex.best_workload, ex.best), _side(wl, cand)
            lab.check(*a) if isinstance(a, tuple) else lab.check(a)
            lab.check(*b) if isinstance(b, tuple) else lab.check(b)
        except ConfigError as e:
            _add(ex, row, f"not valid: {e}", on_step)
            continue
        n_rounds, most, why = _fit(rounds, max_rounds, ex.budget_s,
                                   ex.budget_s - (time.perf_counter() - t0), run_s)
        if budget_out or why:
            budget_out = True
            _add(ex, row, OVER_BUDGET + (f" ({why})" if why else ""), on_step)
            continue
        if stop is not None and stop.is_set():
            ex.note = f"stopped after {_abs(ex)} A/B(s)"
            return
        ends = _Ends(stop)
        events = _timer(run_s, on_run, change or {"model": patch_text(patch)}, line,
                        len(ex.comparisons) + 1, ends)
        t = time.perf_counter()
        try:
            cmp = ab_rounds.ab(lab, a, b, rounds=n_rounds, timeout=timeout, on_run=events,
                               stop=ends, max_rounds=most, width=width)
        except KeyboardInterrupt:
            ex.note = f"interrupted (Ctrl-C) during the A/B of {change_text(change)}"
            raise
        except Exception as e:  # noqa: BLE001 - a change that fails is recorded and skipped
            row["seconds"], row["runs"] = time.perf_counter() - t, ends.runs
            if stop is not None and stop.is_set() and ends.failed is None:
                _add(ex, row, f"stopped: not kept ({ends.runs} run(s))", on_step)
                ex.note = f"stopped during the A/B of {row['change']}"
                return
            _add(ex, row, f"failed: {type(e).__name__}: {_line(e)}", on_step)
            continue
        row["seconds"] = time.perf_counter() - t
        ex.comparisons.append(cmp)
        v = cmp.verdict
        row.update(ab=len(ex.comparisons) - 1, verdict=v.text, ratio=v.ratio, low=v.low,
                   high=v.high, resolved=v.resolved, rounds=v.rounds,
                   runs=len(cmp.runs_a or []) + len(cmp.runs_b or []))
        failed = [r for r in list(cmp.runs_b or []) + list(cmp.runs_a or []) if not r.ok]
        if ends.failed is not None:
            row["runs"] = ends.runs
            _add(ex, row, f"failed: {_first_error(ends.failed)}", on_step)
            continue
        if cmp.note and (cmp.note.startswith("interrupted") or cmp.note.startswith("stopped")):
            _add(ex, row, f"{cmp.note.split(' after')[0]}: not kept ({v.rounds} round(s))",
                 on_step)
            ex.note = f"{cmp.note.split(' after')[0]} during the A/B of {row['change']}"
            return
        if failed and not v.rounds:
            _add(ex, row, f"failed: {_first_error(failed[0])}", on_step)
            continue
        if v.good:
            ex.best, ex.best_workload = cand, wl
            ex.kept = ex.kept + [dict(change) if change else {f"model.{k}": v
                                                             for k, v in patch.items()}]
            if patch:
                ex.patches = ex.patches + [(patch, s.code)]
            _add(ex, row, KEPT, on_step)
            # the new best's own advice: what the change exposed, tried on top of it; what
            # it no longer shows was the old best's problem, gone with this change
            advice = lab.advise(cmp.b)
            queue = _suggested(advice, seen) + _still_shown(ex, advice, queue, row["change"],
                                                            on_step)
        else:
            _add(ex, row, NOT_FASTER + (f" ({len(failed)} run(s) failed)" if failed else ""),
                 on_step)
        if line:
            line.said(f"explore {row['ab'] + 1}: {row['change']}: {v.text} -> {row['outcome']}")


def _suggested(advice, seen: set) -> list:
    out = []
    for s in advice:
        if s.model_patch and not s.change:
            if _new({f"model.{k}": v for k, v in s.model_patch.items()}, seen):
                out.append((s, {}))
        elif not s.change or _new(s.change, seen):
            out.append((s, dict(s.change)))
    return out


def _still_shown(ex, advice, queue: list, kept: str, on_step) -> list:
    """The queued suggestions the new best's ``advice`` still has (and the ``also``
    changes); the others are recorded as gone with the kept change, not tried."""
    now = {_same(s) for s in advice}
    out = []
    for s, change in queue:
        if s is None or _same(s) in now:
            out.append((s, change))
            continue
        _add(ex, _row(s, change, dict(s.model_patch) if not change else {}),
             f"{GONE} {kept}", on_step)
    return out


def _same(s) -> tuple:
    """What makes two runs' suggestions the same one."""
    return s.rule, repr(sorted(s.change.items())), repr(sorted(s.model_patch.items()))


def _row(s, change: dict, patch: dict) -> dict:
    """A row of Exploration.steps before its A/B (if any) fills it."""
    return dict(change=change_text(change) if not patch else patch_text(patch),
                rule=s.rule if s else "also", verdict="", ratio=math.nan, low=math.nan,
                high=math.nan, resolved=False, rounds=0, runs=0, seconds=0.0, kept=False,
                ab=None)


def _new(change: dict, seen: set) -> bool:
    key = tuple(sorted((k, repr(v)) for k, v in change.items()))
    if key in seen:
        return False
    seen.add(key)
    return True


def _add(ex, row: dict, outcome: str, on_step) -> None:
    row["outcome"], row["kept"] = outcome, outcome == KEPT
    ex.rows.append(row)
    if on_step is not None:
        on_step(dict(row))


def _fit(rounds, max_rounds, budget_s, left, run_s) -> tuple:
    """(rounds, max_rounds, '') for lab.ab, or (None, None, why the A/B does not fit the
    budget). An A/B of k rounds is 4 k runs (A B B A), a run estimated as the mean of the
    runs so far; rounds="auto" gets max_rounds cut to what the budget holds."""
    if not math.isfinite(budget_s):
        return rounds, max_rounds, ""
    per = sum(run_s) / len(run_s) if run_s else 0.0
    per_round = 2 * ab_rounds.PER_ROUND * per
    need = ab_rounds.FIRST_LOOK if rounds == "auto" else rounds
    if per_round * need > left:
        return None, None, (f"~{per_round * need:.0f} s for {need * 2 * ab_rounds.PER_ROUND} "
                            f"runs of ~{per:.1f} s, {max(left, 0):.0f} s left")
    if rounds == "auto" and per_round > 0:
        max_rounds = max(ab_rounds.FIRST_LOOK, min(max_rounds, int(left // per_round)))
    return rounds, max_rounds, ""


class _Ends:
    """lab.ab's ``stop``: the caller's stop, or the first failed run of the change (its
    other runs would fail too, or compare a broken config: skip the rest)."""

    def __init__(self, stop):
        self.stop, self.failed, self.runs = stop, None, 0

    def is_set(self) -> bool:
        return self.failed is not None or (self.stop is not None and self.stop.is_set())


def _timer(run_s: list, on_run, change, line, k, ends):
    """lab.ab's per-run callback: each run's wall seconds feed the budget's estimate; a
    failed run of B ends the A/B; the event goes on to ``on_run`` (with the change) and to
    the live line."""
    began: dict = {}

    def event(ev):
        if ev["phase"] == "start":
            began[ev["index"]] = time.perf_counter()
        else:
            ends.runs += 1
            if ev["index"] in began:
                run_s.append(time.perf_counter() - began.pop(ev["index"]))
            if ev["side"] == "B" and not ev["run"].ok and ends.failed is None:
                ends.failed = ev["run"]
        if on_run is not None:
            on_run(dict(ev, change=dict(change)))
        if line and ev["phase"] == "start":
            line.say(f"explore A/B {k}: {change_text(change)} · round {ev['round']} of "
                     f"{ev['rounds']} · {ev['side']} (run {ev['index']} of {ev['of']})")
    return event


def _side(fn, cfg: StepConfig):
    return (fn, cfg) if fn is not None else cfg


def _target(target, start) -> tuple:
    """(the Workload or step, or None; the start config)."""
    if isinstance(target, StepConfig):
        if start is not None and start != target:
            raise ConfigError("lab.explore(cfg, start=...): with a StepConfig as the target, "
                              "it is the start; give one of them")
        return None, target
    if isinstance(target, Workload) or callable(target):
        if start is None:
            return target, StepConfig(scenario="custom")
        if isinstance(start, dict):
            return target, StepConfig(scenario="custom", **start)
        if isinstance(start, StepConfig):
            return target, start if start.scenario == "custom" else start.replace(scenario="custom")
        raise ConfigError(f"lab.explore(..., start={start!r}): give a StepConfig or a dict of "
                          "its fields (None: the defaults)")
    raise ConfigError(f"lab.explore({type(target).__name__}): give a Workload, your step "
                      "function, or a StepConfig of a built-in scenario")


def _budget(budget_s) -> float:
    if budget_s is None:
        return math.inf
    if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or \
            not budget_s > 0:
        raise ConfigError(f"budget_s={budget_s!r}: give the wall seconds the exploration may "
                          "take, a number > 0 (e.g. 600), or None for no limit")
    return float(budget_s)


def _also(also) -> list:
    if isinstance(also, dict):
        also = [also]
    out = []
    for c in also or ():
        if not isinstance(c, dict) or not c:
            raise ConfigError(f"also={also!r}: give a list of StepConfig field changes, e.g. "
                              "also=[{'compile': 'default'}]")
        out.append(dict(c))
    return out


def _abs(ex) -> int:
    return sum(r.get("ab") is not None for r in ex.rows)


def _first_error(run) -> str:
    msg = next((m for m in (run.errors or {}).values() if m), run.status)
    return (msg.strip().splitlines() or [run.status])[-1][:200]


def _line(e) -> str:
    return (str(e).strip().splitlines() or [""])[0][:200]


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
