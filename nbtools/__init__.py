"""torch-nbtools: see what torch.compile, autocast and CUDA Graphs do to a distributed step."""
from __future__ import annotations

__version__ = "0.1.0"

from nbtools.config.step_config import ConfigError, StepConfig  # noqa: E402  (torch-free)

__all__ = ["Lab", "StepConfig", "Workload", "Run", "Comparison", "Verdict", "History",
           "Suggestion", "Exploration", "load_traces", "export_html", "ConfigError", "RunFailed", "RunTimeout",
           "LabClosed", "MissingExtra", "SSH", "__version__"]

# name -> module: every type and error a person meets after a call, importable from here.
_LAZY = {"Comparison": "nbtools.results.comparison", "Verdict": "nbtools.analysis.verdict",
         "History": "nbtools.results.history", "RunFailed": "nbtools.results.errors",
         "RunTimeout": "nbtools.results.errors", "LabClosed": "nbtools.results.errors",
         "MissingExtra": "nbtools.common.extras", "Suggestion": "nbtools.analysis.advice",
         "SSH": "nbtools.lab.hosts", "Exploration": "nbtools.results.exploration"}


def __getattr__(name):
    # Heavy modules (ipyparallel, pandas, bokeh) load on first use, not on import.
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name == "Lab":
        from nbtools.lab.lab import Lab
        return Lab
    if name == "Workload":
        from nbtools.config.workload import Workload
        return Workload
    if name == "Run":
        from nbtools.results.run import Run
        return Run
    if name == "load_traces":
        from nbtools.results.load import load_traces
        return load_traces
    if name == "export_html":
        from nbtools.report.html import export_html
        return export_html
    raise AttributeError(f"module 'nbtools' has no attribute {name!r}")


def __dir__():
    # the lazy names too: dir(nbtools) and tab completion list Lab, Workload, Run, ...
    return sorted(set(globals()) | set(__all__))
