"""An editable install (`pip install -e .`) leaves pyproject's data-files out: the
JupyterLab extension and its server side. `nbtools lab` and `nbtools kernel install` link
them into the environment, where a plain `jupyter lab` then finds them (issue 32.5)."""
from __future__ import annotations

import json
import os
import subprocess
import sys


def test_ensure_installed_links_what_jupyter_then_finds(tmp_path):
    prefix = tmp_path / "env"
    env = dict(os.environ, JUPYTER_PATH="", JUPYTER_CONFIG_PATH="",
               JUPYTER_DATA_DIR=str(tmp_path / "user-data"),
               JUPYTER_CONFIG_DIR=str(tmp_path / "user-config"), PYTHONPATH=os.getcwd())
    # a Python whose data dirs hold no torch-nbtools: sys.prefix pointed at the empty prefix
    code = f"""
import sys, jupyter_core.paths as jp
sys.prefix = {str(prefix)!r}
jp.ENV_JUPYTER_PATH[:] = [{str(prefix / 'share' / 'jupyter')!r}]
jp.ENV_CONFIG_PATH[:] = [{str(prefix / 'etc' / 'jupyter')!r}]
from nbtools.ui import labext
"""
    out = subprocess.run([sys.executable, "-c", code + """
import jupyter_core.paths as jp
jp.SYSTEM_JUPYTER_PATH[:] = []
assert labext.installed_where() is None, labext.installed_where()
assert labext.ensure_installed()
where = labext.installed_where()
print(where, where.resolve())
assert not labext.ensure_installed()      # once is enough
"""], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    link = prefix / "share" / "jupyter" / "labextensions" / "torch-nbtools"
    assert (link / "static" / "remoteEntry.js").exists()
    conf = json.loads((prefix / "etc" / "jupyter" / "jupyter_server_config.d"
                       / "torch-nbtools.json").read_text())
    assert conf["ServerApp"]["jpserver_extensions"] == {"nbtools.ui.labext": True}
    assert "linked the torch-nbtools JupyterLab extension" in out.stdout


def test_a_closed_live_figure_is_collected_without_a_traceback():
    """jupyter_bokeh's close is not idempotent: a closed widget's __del__ closed it again
    and raised KeyError with the whole render bundle (issue 32.5: 438 KB in the kernel log
    as a new tab opened)."""
    code = """
import gc, sys
from bokeh.plotting import figure
from nbtools.ui.bokehjs import LiveBokehModel
f = figure(); f.line([1, 2], [3, 4])
m = LiveBokehModel(f)
m.close(); m.close()
del m; gc.collect()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert out.returncode == 0 and "KeyError" not in out.stderr, out.stderr[-2000:]


def test_the_fallback_loader_brings_every_bundle_a_run_plot_needs():
    """Without the extension (a JupyterLab started before an editable install linked it) the
    kernel sends BokehJS itself: every bundle bokeh says the figures need must be in it (it
    lacked the widgets one and a run's plot showed "javascript error": could not resolve
    type 'Div'). The extension loads the same ones."""
    from pathlib import Path

    from bokeh.embed.bundle import _use_gl, _use_tables, _use_widgets
    from bokeh.document import Document

    from nbtools.ui import bokehjs
    from nbtools.ui.timeline import Timeline, compare_figure
    from support.runs import synthetic_run
    a, b = synthetic_run(), synthetic_run(seed=1)
    js = (Path(bokehjs.__file__).parent / "labextension" / "static"
          / "remoteEntry.js").read_text()
    for layout in (Timeline(a).layout, compare_figure(a, b)):
        doc = Document()
        doc.add_root(layout)
        objs = set(doc.models)
        need = {"bokeh"} | {name for name, used in (
            ("bokeh-widgets", _use_widgets(objs)), ("bokeh-tables", _use_tables(objs)),
            ("bokeh-gl", _use_gl(objs))) if used}
        assert need <= set(bokehjs.COMPONENTS), need - set(bokehjs.COMPONENTS)
        for name in need:
            assert f'"{name}.min.js"' in js, f"the extension does not load {name}"
