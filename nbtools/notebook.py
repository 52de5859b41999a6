"""Run a tutorial notebook headless and export it as offline HTML.

Execution uses nbclient with the ``torch-nbtools`` kernel; a ``parameters``-tagged cell can
be overridden (the tests run every notebook at small sizes this way). Export executes
with ``NBTOOLS_STATIC=1`` so figures come out as static inline Bokeh instead of live
widgets (whose JavaScript would come from a CDN), then strips every remote script.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

KERNEL = "torch-nbtools"
_REMOTE_SCRIPT = re.compile(r"<script[^>]*\bsrc=[\"']https?://[^>]*>\s*</script>", re.I)
_REMOTE_LINK = re.compile(r"<link[^>]*\bhref=[\"']https?://[^>]*>", re.I)
_WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def execute(path, parameters: dict | None = None, timeout: int = 1800, cwd=None,
            static: bool = False, kernel_name: str | None = None):
    """Execute a notebook; returns the executed NotebookNode. ``parameters`` replace the
    assignments of the cell tagged ``parameters`` (a new cell after it sets them)."""
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(str(path), as_version=4)
    if parameters:
        inject_parameters(nb, parameters)
    name = kernel_name or nb.metadata.get("kernelspec", {}).get("name") or KERNEL
    old = os.environ.get("NBTOOLS_STATIC")
    os.environ["NBTOOLS_STATIC"] = "1" if static else "0"
    try:
        client = NotebookClient(nb, timeout=timeout, kernel_name=name,
                                resources={"metadata": {"path": str(cwd or Path(path).parent)}})
        client.execute()
    finally:
        if old is None:
            os.environ.pop("NBTOOLS_STATIC", None)
        else:
            os.environ["NBTOOLS_STATIC"] = old
    return nb


def inject_parameters(nb, parameters: dict) -> None:
    import nbformat
    idx = next((i for i, c in enumerate(nb.cells)
                if "parameters" in c.get("metadata", {}).get("tags", [])), None)
    if idx is None:
        raise ValueError("the notebook has no cell tagged 'parameters' to override; tag the "
                         "cell that sets the sizes with 'parameters'")
    src = "# injected parameters\n" + "\n".join(f"{k} = {v!r}" for k, v in parameters.items())
    cell = nbformat.v4.new_code_cell(src)
    cell.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(idx + 1, cell)


def to_html(nb) -> str:
    """Offline HTML of an executed notebook: widget views dropped where a static copy
    exists, and no remote scripts or stylesheets."""
    from nbconvert import HTMLExporter
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if _WIDGET_MIME in data and len(data) > 1:
                del data[_WIDGET_MIME]
            elif _WIDGET_MIME in data:
                data.pop(_WIDGET_MIME)
                data["text/plain"] = "(interactive widget: re-run the notebook to use it)"
    nb.metadata.pop("widgets", None)
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    body = _REMOTE_SCRIPT.sub("", body)
    return _REMOTE_LINK.sub("", body)


def export_notebook(path, output=None, execute_first: bool = True, parameters=None,
                    timeout: int = 3600) -> Path:
    import nbformat
    path = Path(path)
    nb = execute(path, parameters, timeout, static=True) if execute_first \
        else nbformat.read(str(path), as_version=4)
    out = Path(output) if output else path.with_suffix(".html")
    out.write_text(to_html(nb), encoding="utf-8")
    return out
