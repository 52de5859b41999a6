"""ui: a Run's timeline (Bokeh), built once and updated by replacing data: data (level of
detail, sources), figure, compile strip, interactions (search, region table, flows), memory."""
from nbtools.ui.timeline.data import lod, stack_depth  # noqa: F401
from nbtools.ui.timeline.figure import Timeline, run_figure  # noqa: F401
from nbtools.ui.timeline.compare import compare_figure  # noqa: F401
