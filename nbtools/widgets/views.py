"""The lab's widgets, registered where the lab looks them up (nbtools/results/views.py): the
panel (``lab.panel()``) and the progress bars ``lab.run`` shows in a live kernel."""
from __future__ import annotations

from nbtools.results.views import register
from nbtools.common.display_mode import static_mode


@register("lab.panel")
def lab_panel(lab, cfg=None, workload=None):
    """The widgets in a live kernel; in an export (NBTOOLS_STATIC) nothing could drive
    them, so the panel is its static summary and timeline instead."""
    if static_mode():
        from nbtools.ui.html import StaticPanel
        return StaticPanel(lab, cfg, workload)
    from nbtools.widgets.panel import Panel
    return Panel(lab, cfg, step_fn=workload).widget


@register("lab.progress")
def lab_progress(tracker, run_id: str):
    """Progress bars for a run in a live kernel (the lab finds them through results.views)."""
    from nbtools.widgets.progress import ProgressBars
    return ProgressBars(tracker, run_id)
