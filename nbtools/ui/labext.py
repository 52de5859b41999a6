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
    """The installed bokeh's BokehJS files, which the lab extension serves to JupyterLab."""
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


SERVER_CONFIG = "torch-nbtools.json"


def installed_where() -> "Path | None":
    """The torch-nbtools labextension folder Jupyter finds, or None (an editable install:
    pip leaves pyproject's data-files out of it)."""
    from jupyter_core.paths import jupyter_path
    for p in jupyter_path("labextensions"):
        if (Path(p) / "torch-nbtools" / "package.json").exists():
            return Path(p) / "torch-nbtools"
    return None


def ensure_installed(prefix: str | None = None, say=print) -> bool:
    """Where Jupyter does not find the extension (``pip install -e .``), link it into the
    environment and enable the server side there, as the wheel's data files would: the
    JupyterLab started next (``jupyter lab`` too) loads it. Returns whether it linked."""
    import json
    import sys
    if installed_where() is not None:
        return False
    root = Path(prefix or sys.prefix)
    dest = root / "share" / "jupyter" / "labextensions" / "torch-nbtools"
    conf = root / "etc" / "jupyter" / "jupyter_server_config.d" / SERVER_CONFIG
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.is_symlink():
            dest.unlink()                     # a link to a clone that moved
        dest.symlink_to(LABEXTENSION, target_is_directory=True)
        conf.parent.mkdir(parents=True, exist_ok=True)
        from nbtools.common.atomic import write_file     # whole or not at all
        write_file(conf, json.dumps(
            {"ServerApp": {"jpserver_extensions": {"nbtools.ui.labext": True}}}, indent=2) + "\n")
    except OSError as e:
        say(f"note: could not install the torch-nbtools JupyterLab extension into {root} ({e}):"
            " live figures in JupyterLab need it")
        return False
    say(f"linked the torch-nbtools JupyterLab extension into {dest} (an editable install "
        "leaves it out); restart a running JupyterLab to load it")
    return True
