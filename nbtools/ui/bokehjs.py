"""BokehJS in the page, never in the notebook file.

Where the torch-nbtools JupyterLab extension is installed (the wheel installs it; see
ui/labext.py), the page loads the installed bokeh's BokehJS itself, once, the first time a
figure needs it, and a new tab or a reload draws every figure: nothing is sent per output.
Elsewhere (a front end without the extension) the fallback below applies.

jupyter_bokeh's widget (BokehModel) draws with the page's ``window.Bokeh``; its
labextension does not bring BokehJS (4.1: its view calls ``window.Bokeh.require`` in its
constructor, so a figure shown before anything loaded BokehJS fails with "Cannot read
properties of undefined (reading 'require')"). Bokeh's own ``output_notebook`` loads it by
leaving every BokehJS bundle (8 MB inline) in the cell's output, where autosave writes it
into the .ipynb.

``ensure_loaded()`` sends the core bundles once per display, as an output that runs them
(when BokehJS of this version is not there yet) and then replaces that output with an empty
one: the page keeps BokehJS, the saved notebook keeps a few bytes. It must be called just
before the widget's own output, so the script has run before any BokehView is created.
Static copies (exports) carry BokehJS themselves; see ``display.static_html``.
"""
from __future__ import annotations

import functools
import uuid

from jupyter_bokeh import BokehModel
from traitlets import Unicode

from nbtools.common.display_mode import static_mode

# What the figures use: core (plots, hover, CustomJSHover), the WebGL backend option, and
# the widgets and tables bundles (the timeline's search field, switches and region table:
# without them BokehJS "could not resolve type 'Div'" and the figure showed a javascript
# error). The same bundles the extension loads (labextension/static/remoteEntry.js).
COMPONENTS = ["bokeh", "bokeh-gl", "bokeh-widgets", "bokeh-tables"]
LOAD_MIME = "application/vnd.bokehjs_load.v0+json"   # jupyter_bokeh's renderer runs it


@functools.lru_cache(maxsize=1)
def loader_js() -> str:
    """One script: runs the bundles unless this BokehJS version is already in the page.
    ``.call(window)``: the bundles register on ``this``."""
    import bokeh
    from bokeh.resources import Resources
    bundles = Resources(mode="inline", components=COMPONENTS).js_raw
    body = "\n".join(f"(function() {{\n{js}\n}}).call(window);" for js in bundles)
    return (f"(function() {{\n  var B = window.Bokeh;\n"
            f"  if (B !== undefined && B[{bokeh.__version__!r}] !== undefined) return;\n"
            f"{body}\n}})();")


@functools.lru_cache(maxsize=1)
def extension_installed() -> bool:
    """The torch-nbtools JupyterLab extension is where this environment's Jupyter looks."""
    from pathlib import Path
    from jupyter_core.paths import jupyter_path
    return any((Path(p) / "torch-nbtools" / "package.json").exists()
               for p in jupyter_path("labextensions"))


def ensure_loaded() -> None:
    """Load BokehJS into the page that shows the next output (no-op outside a kernel)."""
    try:
        from IPython import get_ipython
        from IPython.display import display, update_display
    except ImportError:  # pragma: no cover - ipywidgets depends on IPython
        return
    ip = get_ipython()
    if ip is None or getattr(ip, "kernel", None) is None or static_mode():
        return           # static copies carry BokehJS themselves
    if extension_installed():
        return           # the page loads BokehJS itself
    _link_extension()
    js = loader_js()
    display_id = f"nbtools-bokehjs-{uuid.uuid4().hex}"
    # Both types: JupyterLab/Notebook 7 run the bokeh one (jupyter_bokeh's renderer, rank 0),
    # front ends without it run plain JavaScript. The page runs the script as the output is
    # attached, before it handles the next message (the empty update).
    display({LOAD_MIME: js, "application/javascript": js}, raw=True, display_id=display_id)
    update_display({"text/plain": ""}, raw=True, display_id=display_id)


@functools.lru_cache(maxsize=1)
def _link_extension() -> None:
    """Once per kernel: where Jupyter does not find the extension (``pip install -e .``
    leaves it out), link it into the environment as ``nbtools lab`` would, so a JupyterLab
    started next loads it (this page keeps the loader below: a new tab of a server started
    before the link would find no BokehJS)."""
    from nbtools.ui.labext import ensure_installed
    ensure_installed(say=lambda text: print(f"torch-nbtools: {text}"))


class LiveBokehModel(BokehModel):
    """jupyter_bokeh's widget, whose views always start from the figure as it is now.

    BokehModel sends each change as a patch to the views that exist; a view created later
    (the widget displayed after an update, or the page reloaded) starts from the render
    bundle taken when the widget was made and never sees the patches sent before it: a
    panel showing its last run at construction drew an empty figure, and a range patched
    to the value Python already held was never sent again. So the bundle is re-taken
    whenever the front end asks for the widget's state, and pushed by ``refresh()``
    before each display."""

    _patched = False     # a patch went out since the bundle was last taken
    _repicture = None    # pictured=True: keeps the saved notebook's picture current
    _nbtools_picture = Unicode("").tag(sync=True)       # saved_picture.PICTURE

    def __init__(self, model, pictured: bool = False, **kwargs):
        super().__init__(model, **kwargs)
        if pictured:
            from nbtools.ui.saved_picture import PICTURE, Repicture, b64png
            self._repicture = Repicture(lambda: b64png(self._model),
                                        lambda v: setattr(self, PICTURE, v))

    def picture(self) -> str:
        """The base64 PNG of the figure as it is now (ui/picture.py)."""
        if self._repicture is None:
            from nbtools.ui.saved_picture import b64png
            return b64png(self._model)
        return self._repicture.current()

    def _document_patched(self, event) -> None:
        self._patched = True
        if self._repicture is not None:     # a zoom (from the page too) or new data
            self._repicture.poke()
        super()._document_patched(event)

    def get_state(self, key=None, drop_defaults=False):
        """The widget's state, with the render bundle refreshed only when the figure changed
        since it was last sent (a fresh page asks every widget at once)."""
        if self._patched and (key is None or "render_bundle" in key):
            # set without notifying: the views that exist are patched already. Only when
            # something changed: a new page asks for every widget's state in one request
            # (jupyterlab-manager gives it 4 s), and re-drawing each figure's bundle made
            # it late, then fall back to one request per widget (20-50 s to go live).
            self._trait_values["render_bundle"] = self._model_to_traits(self._model)
            self._patched = False
        return super().get_state(key=key, drop_defaults=drop_defaults)

    def __repr__(self) -> str:
        """Short, without the render bundle: ipywidgets' repr lists every trait, and a
        message naming the widget (a traceback, a warning) carried the whole bundle. Printed
        to stderr in a cell, JupyterLab took each "/..." run of its base64 arrays for a file
        path and asked the server about it (a name too long for the file system: a 500)."""
        titles = [getattr(getattr(f, "title", None), "text", "") for f in
                  getattr(self._model, "children", None) or [self._model]]
        title = next((t for t in titles if t), type(self._model).__name__)
        return f"LiveBokehModel(model_id={self.model_id!r}, {title!r})"

    def close(self) -> None:
        """Idempotent: jupyter_bokeh's close removes its document callback unguarded, so
        a closed widget's ``__del__`` (which closes again) raised ``KeyError`` with the
        whole render bundle in its message (a 438 KB kernel traceback).

        The messages its views had already sent land quietly: a figure's view sends its
        size, ranges and refitted names as it draws, and the kernel reads them only when
        free (after a whole Run All, or the Compare that replaced the figure). Messages to
        a comm it no longer knows are logged "No such comm" on its stderr, which
        JupyterLab shows in its Log Console; an inert comm keeps the id."""
        comm = self.comm
        super(BokehModel, self).close()          # the widget's own close, not BokehModel's
        if comm is not None:
            _keep_id_quiet(comm.comm_id)
        doc = self._document
        if doc is not None:
            try:
                doc.remove_on_change(self)
            except (KeyError, ValueError):
                pass

    def refresh(self) -> None:
        """Give the front end's copy the figure as it is now (existing views redraw)."""
        if self._patched:
            self.send_state("render_bundle")

    def _repr_mimebundle_(self, **kwargs):
        ensure_loaded()
        self.refresh()
        return super()._repr_mimebundle_(**kwargs)


CLOSED_TARGET = "nbtools.closed"   # no front end opens or lists comms of this target


def _keep_id_quiet(comm_id: str) -> None:
    """Register a comm that takes and drops messages under a closed widget's id (it sends
    nothing, not even its opening: the page's model is already gone)."""
    try:
        from comm import create_comm, get_comm_manager
        late = create_comm(comm_id=comm_id, primary=False, target_name=CLOSED_TARGET)
        get_comm_manager().register_comm(late)
    except Exception:  # noqa: BLE001 - a quieter log is not worth a failed close
        pass

