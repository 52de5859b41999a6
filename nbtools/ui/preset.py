"""Which run a panel opens with (the live panel, and its static copy in an export).

Preset to a config (``lab.panel(cfg)``, ``lab.panel(workload, cfg)``), a panel shows the
newest run of exactly that config and workload in the history, or says that config has not
run yet: the newest run of another config, with its flags, looked like the preset's, and
Suggest, Try and Explore then worked from it. Not preset (``lab.panel()``), the newest run."""
from __future__ import annotations


def preset_config(cfg=None, workload=None):
    """The config a panel presets: ``cfg`` as given (None: the defaults); with a workload
    (or step function) of the person's own, scenario "custom" (what Lab.run runs)."""
    from nbtools.config.step_config import StepConfig
    if workload is None:
        return cfg if cfg is not None else StepConfig()
    return (cfg or StepConfig(scenario="custom")).replace(scenario="custom")


def workload_name(workload):
    """The name a run of ``workload`` keeps (``run.env["workload"]``; Lab.run writes it)."""
    if workload is None:
        return None
    return getattr(workload, "name", None) or getattr(workload, "__name__", None)


def opening_run(history, cfg=None, workload=None, preset: bool = True):
    """The newest finished run of ``cfg`` run with ``workload`` (None: a built-in scenario),
    or None when there is none. ``preset=False``: the newest finished run of any config."""
    runs = [r for r in history if r.ok]
    if preset:
        name = workload_name(workload)
        runs = [r for r in runs if r.config == cfg and (r.env or {}).get("workload") == name]
    return runs[-1] if runs else None


def not_run_yet(cfg) -> str:
    """What a panel preset to ``cfg`` says while no run of it is in the history."""
    return (f"{cfg.label()} has not run yet in this lab's history: press Run (Suggest and "
            "Try need a run of it; Explore starts from it)")
