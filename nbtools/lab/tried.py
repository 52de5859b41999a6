"""What this lab has already seen a move do for a workload: a run of it that failed, an A/B
of it that lost or could not matter. lab.advise sets such a suggestion aside with the
reason instead of proposing it again (issue 43.2), and lab.explore does not pay for it
twice. Kept for the lab's life, beside its history (failed runs are read from there)."""
from __future__ import annotations

from nbtools.analysis.advice import change_key
from nbtools.config.step_config import RUN_ONLY


def _name(run_or_workload, cfg) -> str:
    env = getattr(run_or_workload, "env", None)
    if isinstance(env, dict):
        return str(env.get("workload") or (cfg.scenario if cfg is not None else ""))
    name = getattr(run_or_workload, "name", None) or getattr(run_or_workload, "__name__", None)
    return str(name or (cfg.scenario if cfg is not None else ""))


def _base(cfg):
    return cfg.replace(**{f: getattr(type(cfg)(), f) for f in RUN_ONLY}) if cfg else None


def remember(lab, workload, base_cfg, suggestion_or_change, why: str) -> None:
    """``why`` the move (a Suggestion, or a change dict) should not be proposed again for
    this workload from ``base_cfg``."""
    memo = lab.__dict__.setdefault("_tried", {})
    if isinstance(suggestion_or_change, dict):
        k = (tuple(sorted((f, repr(v)) for f, v in suggestion_or_change.items())), ())
    else:
        k = change_key(suggestion_or_change)
    memo[(_name(workload, base_cfg), _base(base_cfg), k)] = why


def seen_for(lab, run) -> dict:
    """{change_key: why} for lab.advise(run): what this lab remembers for the run's
    workload and config, and every failed run of the same workload whose config differs
    from this run's by a change a suggestion could make."""
    cfg = run.config
    if cfg is None:
        return {}
    name, base = _name(run, cfg), _base(cfg)
    out = {k: why for (n, b, k), why in lab.__dict__.get("_tried", {}).items()
           if n == name and b == base}
    for other in lab.history:
        if other.ok or other.config is None or _name(other, other.config) != name:
            continue
        change = {f: b for f, (a, b) in cfg.diff(other.config).items() if f not in RUN_ONLY}
        if not change:
            continue
        err = next((e for e in (other.errors or {}).values() if e), other.status)
        line = (str(err).strip().splitlines() or [""])[-1][:160]
        k = (tuple(sorted((f, repr(v)) for f, v in change.items())), ())
        out.setdefault(k, f"run #{other.run_id} with this change failed: {line}")
    return out
