"""How a figure shows in a notebook: live (a jupyter_bokeh widget, so zoom refines the
timeline in Python) or static (inline Bokeh HTML, what an offline export needs: widget JS
would otherwise come from a CDN). ``NBTOOLS_STATIC=1`` selects static; the notebook
exporter sets it."""
from __future__ import annotations

import os


def static_mode() -> bool:
    return os.environ.get("NBTOOLS_STATIC", "") not in ("", "0")


def static_html(layout) -> str:
    """The figure's div and script, with BokehJS inlined: the cell output stands alone."""
    from bokeh.embed import file_html
    from bokeh.resources import INLINE
    page = file_html(layout, INLINE, title="")
    start, end = page.index("<body>") + len("<body>"), page.rindex("</body>")
    head = page[page.index("<head>") + len("<head>"):page.index("</head>")]
    return _scripts(head) + page[start:end]


def _scripts(head: str) -> str:
    import re
    return "".join(re.findall(r"<script[^>]*>.*?</script>", head, flags=re.S))


class Figure:
    """What run.plot() and compare(a, b).plot() return: the Bokeh layout (``.layout``) and a
    notebook representation (live widget, or static HTML under NBTOOLS_STATIC)."""

    def __init__(self, layout, timeline=None):
        self.layout, self.timeline = layout, timeline

    def _repr_mimebundle_(self, include=None, exclude=None):
        if static_mode():
            return {"text/html": static_html(self.layout)}
        from jupyter_bokeh.widgets import BokehModel
        w = BokehModel(self.layout)
        return w._repr_mimebundle_(include=include, exclude=exclude)

    def save(self, path) -> str:
        from bokeh.io import save
        from bokeh.resources import INLINE
        return save(self.layout, filename=str(path), resources=INLINE, title="torch-nbtools")
