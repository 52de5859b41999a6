"""How a figure shows in a notebook: live (a jupyter_bokeh widget, so zoom refines the
timeline in Python) or static (inline Bokeh HTML, what an offline export needs: widget JS
would otherwise come from a CDN). ``NBTOOLS_STATIC=1`` selects static; the notebook
exporter sets it.

A live output is also a document: beside the widget view it carries a PNG of the figure
(ui/picture.py), a line of text, and ``FIGURE_MIME``, which the torch-nbtools JupyterLab
extension renders as the live view while the widget's model is in the kernel and as the
picture otherwise (kernel stopped, notebook reopened). nbconvert, GitHub and nbviewer
know neither widget view nor FIGURE_MIME and show the PNG."""
from __future__ import annotations

from nbtools.common.display_mode import static_mode


FIGURE_MIME = "application/vnd.nbtools.figure.v1+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def document_bundle(bundle: dict, picture: str, what: str = "figure") -> dict:
    """A widget's mimebundle plus what shows it without a kernel: its picture (base64 PNG
    from ui/picture.py, which the widget keeps current: ui/saved_picture.py), a text line,
    and the extension's mimetype (which names the widget it stands for)."""
    from nbtools.ui.picture import NOTE
    view = bundle.get(WIDGET_MIME)
    if view is None:
        return bundle
    out = dict(bundle)
    out["image/png"] = picture
    out["text/plain"] = f"<torch-nbtools {what}> {NOTE}"
    out[FIGURE_MIME] = {"model_id": view["model_id"], "what": what}
    return out


def static_html(layout) -> str:
    """The figure's div and script, with BokehJS inlined: the cell output stands alone."""
    import logging
    from bokeh.embed import file_html
    from bokeh.resources import INLINE
    # the live figure's Python callbacks (LOD refine) are simply inert in a static copy;
    # bokeh's warning about them would land in every exported cell
    quiet = logging.getLogger("bokeh.embed.util")
    level, quiet.level = quiet.level, logging.ERROR
    try:
        page = file_html(layout, INLINE, title="")
    finally:
        quiet.setLevel(level)
    return _head_scripts_and_body(page)


def _head_scripts_and_body(page: str) -> str:
    """BokehJS contains the texts "<head>", "</head>" and "<body>" but never "</script>":
    set the script blocks aside before looking for the page's own tags."""
    import re
    scripts = []

    def hide(m):
        scripts.append(m.group(0))
        return f"\x00{len(scripts) - 1}\x00"

    bare = re.sub(r"<script[^>]*>.*?</script>", hide, page, flags=re.S)
    head = bare[bare.index("<head>") + len("<head>"):bare.index("</head>")]
    body = bare[bare.index("<body>") + len("<body>"):bare.rindex("</body>")]
    restore = lambda text: re.sub("\x00(\\d+)\x00", lambda m: scripts[int(m.group(1))], text)
    return "".join(restore(m) for m in re.findall("\x00\\d+\x00", head)) + restore(body)


class Figure:
    """What run.plot() and compare(a, b).plot() return: the Bokeh layout (``.layout``) and a
    notebook representation (live widget, or static HTML under NBTOOLS_STATIC)."""

    def __init__(self, layout, timeline=None):
        self.layout, self.timeline = layout, timeline

    def _repr_mimebundle_(self, include=None, exclude=None):
        if static_mode():
            return {"text/html": static_html(self.layout)}
        from nbtools.ui.bokehjs import LiveBokehModel   # loads BokehJS into the page, not the .ipynb
        view = LiveBokehModel(self.layout, pictured=True)
        bundle = view._repr_mimebundle_(include=include, exclude=exclude)
        return document_bundle(bundle, view.picture())

    def save(self, path, force: bool = False) -> str:
        """Write the figure as standalone HTML (BokehJS inline, opens offline); returns the
        path. The page carries nbtools' mark; any other existing file is refused before
        anything is drawn (FileExistsError naming it) unless ``force``. Written whole or
        not at all (an OSError naming the file leaves the old one as it was)."""
        from bokeh.embed import file_html
        from bokeh.resources import INLINE
        from nbtools.common.atomic import write_file
        from nbtools.common.outputs import mark_html, output_refusal
        why = output_refusal(path, "force=True", force=force)
        if why:
            raise FileExistsError(why)
        # a static page by design: the live figure's Python callbacks are left behind
        page = file_html(self.layout, resources=INLINE, title="torch-nbtools",
                         suppress_callback_warning=True)
        return str(write_file(path, mark_html(page, "Figure.save")))
