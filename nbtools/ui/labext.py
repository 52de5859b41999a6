"""Jupyter server side of the torch-nbtools JupyterLab extension: serves the installed
bokeh's BokehJS at ``{base_url}nbtools/bokehjs/`` (the page loads it once, the first time
a figure needs it: same version as the bokeh that made the figure, nothing from a CDN, no
BokehJS in any notebook file) and points JupyterLab at the prebuilt extension.

The wheel installs the extension to share/jupyter/labextensions/torch-nbtools and enables
this module in etc/jupyter/jupyter_server_config.d/torch-nbtools.json (pyproject's
data-files); ``python -m nbtools lab`` needs nothing more."""
from __future__ import annotations

from pathlib import Path

LABEXTENSION = Path(__file__).with_name("labextension")
ROUTE = "nbtools/bokehjs"


def bokehjs_dir() -> Path:
    from bokeh.util.paths import bokehjs_path
    return Path(bokehjs_path()) / "js"


def _jupyter_labextension_paths():
    return [{"src": str(LABEXTENSION), "dest": "torch-nbtools"}]


def _jupyter_server_extension_points():
    return [{"module": "nbtools.ui.labext"}]


def _load_jupyter_server_extension(serverapp) -> None:
    from jupyter_server.base.handlers import FileFindHandler
    from jupyter_server.utils import url_path_join
    web_app = serverapp.web_app
    route = url_path_join(web_app.settings["base_url"], ROUTE, "(.*)")
    web_app.add_handlers(".*$", [(route, FileFindHandler, {"path": [str(bokehjs_dir())]})])
