"""The ui's views of results, registered where the data classes look them up
(nbtools/results/views.py): a run's timeline and summary, a comparison's figure and table
(the lab's panel: nbtools/widgets/views.py)."""
from __future__ import annotations

from nbtools.results.views import register


@register("run.plot")
def run_plot(run, **kw):
    """The per-rank timeline: a live widget in Jupyter, ``.layout`` for Bokeh."""
    from nbtools.ui.display import Figure
    from nbtools.ui.timeline import Timeline
    tl = Timeline(run, **kw)
    return Figure(tl.layout, tl)


@register("run.html")
def run_html(run) -> str:
    """A run as HTML: its summary, flags and environment (Run._repr_html_)."""
    from nbtools.ui.html import run_html as html
    return html(run)


@register("comparison.plot")
def comparison_plot(cmp, **kw):
    """Both runs' timelines aligned at their first profiled step, with the category deltas."""
    from nbtools.ui.display import Figure
    from nbtools.ui.timeline import compare_figure
    return Figure(compare_figure(cmp.a, cmp.b, **kw))


@register("comparison.html")
def comparison_html(cmp) -> str:
    """A comparison as HTML (Comparison._repr_html_)."""
    from nbtools.ui.html import comparison_html as html
    return html(cmp)


@register("exploration.plot")
def exploration_plot(ex, **kw):
    """Exploration.plot(): each A/B's ratio and interval, as a displayable Figure."""
    from nbtools.ui.display import Figure
    from nbtools.ui.exploration import figure
    return Figure(figure(ex, **kw))


@register("exploration.html")
def exploration_html(ex) -> str:
    """Exploration's HTML (verdict, steps table, the winner's code) for notebooks and reports."""
    from nbtools.ui.exploration import exploration_html as html
    return html(ex)
