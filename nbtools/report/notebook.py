"""Run a tutorial notebook headless and export it as offline HTML.

Execution uses nbclient with the ``torch-nbtools`` kernel; a ``parameters``-tagged cell can
be overridden (the tests run every notebook at small sizes this way). Export executes
with ``NBTOOLS_STATIC=1`` so figures come out as static inline Bokeh instead of live
widgets (whose JavaScript would come from a CDN), then strips every remote script.
"""
from __future__ import annotations

import difflib
import os
import re
import time
from pathlib import Path

from nbtools.common.atomic import atomic_path, write_file
from nbtools.common.outputs import NOTEBOOK_MARK, mark_html, output_refusal
from nbtools.common.text import terminal_text
from nbtools.config.step_config import ConfigError

KERNEL = "torch-nbtools"
_REMOTE_SCRIPT = re.compile(r"<script[^>]*\bsrc=[\"']https?://[^>]*>\s*</script>", re.I)
_REMOTE_LINK = re.compile(r"<link[^>]*\bhref=[\"']https?://[^>]*>", re.I)
_WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


class NotebookStopped(RuntimeError):
    """Execution stopped before the end (a cell raised, a cell or the whole notebook ran out
    of time). ``nb`` holds every output produced up to that point."""

    def __init__(self, message: str, nb, cell_index: int | None):
        super().__init__(message)
        self.nb, self.cell_index = nb, cell_index


def execute(path, parameters: dict | None = None, timeout: int = 1800, cwd=None,
            static: bool = False, kernel_name: str | None = None,
            deadline_s: float | None = None, progress=False):
    """Execute a notebook; returns the executed NotebookNode. ``parameters`` replace the
    assignments of the cell tagged ``parameters`` (a new cell after it sets them).
    ``timeout`` bounds each cell, ``deadline_s`` the whole notebook (the running cell is
    interrupted when it passes). ``progress``: True prints each cell's start and end, and
    each lab run's phases, to stderr; a callable gets those lines instead.
    Raises NotebookStopped, carrying the partial notebook."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellControlSignal, CellExecutionError, DeadKernelError
    nb = read_notebook(path)
    if parameters:
        inject_parameters(nb, parameters)
    name = kernel_name or nb.metadata.get("kernelspec", {}).get("name") or KERNEL
    start = time.monotonic()

    def cell_timeout(cell) -> int:
        if deadline_s is None:
            return timeout
        return max(1, min(timeout, int(deadline_s - (time.monotonic() - start))))

    old = os.environ.get("NBTOOLS_STATIC")
    os.environ["NBTOOLS_STATIC"] = "1" if static else "0"
    say = progress if callable(progress) else _stderr if progress else None
    client = _client_class()(nb, timeout=timeout, timeout_func=cell_timeout,
                             interrupt_on_timeout=True, kernel_name=name,
                             resources={"metadata": {"path": str(cwd or Path(path).parent)}})
    if say is not None:
        _report_cells(client, nb, say, start)
    running = []   # the cell being run: a dead kernel leaves no output to find it by

    def on_start(cell, cell_index, **_):
        running[:] = [cell_index]
    client.on_cell_start = on_start
    try:
        client.execute()
    except (CellExecutionError, CellControlSignal, DeadKernelError, TimeoutError,
            KeyboardInterrupt, RuntimeError) as e:
        index = running[0] if running else _last_executed(nb)
        why = (f"it ran past its {deadline_s:.0f} s deadline"
               if deadline_s is not None and time.monotonic() - start >= deadline_s - 1
               else f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}")
        if isinstance(e, DeadKernelError):
            why += " (the kernel died: out of memory, or a crash in native code)"
        where = f"stopped at cell {index}" if index is not None else \
            "stopped before its first cell ran (the kernel did not start)"
        raise NotebookStopped(f"{Path(path).name} {where}: {why}", nb, index) from e
    finally:
        if old is None:
            os.environ.pop("NBTOOLS_STATIC", None)
        else:
            os.environ["NBTOOLS_STATIC"] = old
    return nb


def _stderr(line: str) -> None:
    import sys
    # a cell's first line and a run's progress come from the notebook: no escape sequences
    print(terminal_text(line), file=sys.stderr, flush=True)


class NotebookUnreadable(ValueError):
    """A file ``read_notebook`` cannot take as a notebook, said in one line naming it."""


MAX_DEPTH = 100
"""How deeply a notebook's JSON may nest. A real one nests about ten levels (widget state,
JSON outputs); nbformat walks it recursively and raised RecursionError, with a traceback,
on a file nested 900 levels deep."""


def read_notebook(path):
    """The notebook at ``path`` (nbformat 4, validated), or NotebookUnreadable saying why in
    one line: not JSON, nested past MAX_DEPTH, a format version this nbformat does not read,
    not valid against its schema."""
    import json
    import nbformat
    name = terminal_text(str(path))
    try:
        with open(path, "rb") as fh:
            doc = json.loads(fh.read())
    except RecursionError:
        raise NotebookUnreadable(f"{name}: not a valid notebook: its JSON nests deeper than "
                                 "Python's reader goes (a notebook nests about ten levels)") \
            from None
    except (ValueError, UnicodeDecodeError) as e:
        raise NotebookUnreadable(f"{name}: not a notebook (not notebook JSON: "
                                 f"{' '.join(str(e).split())[:120]})") from None
    if not isinstance(doc, dict):
        raise NotebookUnreadable(f"{name}: not a notebook (its JSON is a "
                                 f"{type(doc).__name__}, not an object with cells)")
    where = _too_deep(doc)
    if where:
        raise NotebookUnreadable(f"{name}: not a valid notebook: {where} nests more than "
                                 f"{MAX_DEPTH} levels deep (a notebook nests about ten); "
                                 "remove that metadata or output")
    major = doc.get("nbformat")
    if "nbformat" not in doc:
        raise NotebookUnreadable(f"{name}: not a valid notebook (no 'nbformat' field saying "
                                 "its format version)")
    if not isinstance(major, int) or isinstance(major, bool) or major not in (3, 4):
        raise NotebookUnreadable(f"{name}: not a valid notebook: nbformat {_short(major)} is "
                                 "not a format this nbtools reads (4, Jupyter's current, or "
                                 "3); open and save it in JupyterLab, or fix that field")
    try:
        nb = nbformat.reads(json.dumps(doc), as_version=4)
        nbformat.validate(nb)
    except Exception as e:  # noqa: BLE001 - nbformat's errors vary by version; one line each
        raise NotebookUnreadable(f"{name}: not a valid notebook ({type(e).__name__}: "
                                 f"{' '.join(str(e).split())[:160]})") from None
    return nb


def _too_deep(doc) -> str:
    """Where the JSON nests past MAX_DEPTH ("metadata.a.b..."), or "". Iterative: the walk
    itself must not recurse."""
    stack = [(doc, 0, "")]
    while stack:
        node, depth, where = stack.pop()
        if depth > MAX_DEPTH:
            return where.split(".", 1)[-1][:60] + ("..." if len(where) > 60 else "")
        items = node.items() if isinstance(node, dict) else enumerate(node) \
            if isinstance(node, list) else ()
        for k, v in items:
            if isinstance(v, (dict, list)):
                stack.append((v, depth + 1, f"{where}.{k}"))
    return ""


def _short(v) -> str:
    s = repr(v)
    return s if len(s) <= 30 else s[:27] + "..."


# progress_view's text: "run <id>: <phase> · <s> s · rank 0: ..."; updated in place every
# second in a notebook, which a terminal would show as a line a second
_RUN_LINE = re.compile(r"^run (\w{8}): ([^·]*)")
_HEARTBEAT_S = 15.0


def _client_class():
    """NotebookClient that also hands a lab run's progress lines (display updates from the
    kernel) to ``self.nbtools_say``: an export shows where a 65 s cell is."""
    from nbclient import NotebookClient

    class Client(NotebookClient):
        nbtools_say = None

        def create_kernel_manager(self):
            # local sockets (IPC): ipykernel warns on the terminal of every export that a
            # TCP kernel runs without encryption; a socket file is local and private
            km = super().create_kernel_manager()
            path = _ipc_path()
            if path is not None:
                km.transport, km.ip = "ipc", path
            return km
        nbtools_last = ("", "", 0.0)      # run, phase, when said

        def process_message(self, msg, cell, cell_index):
            if self.nbtools_say is not None and msg.get("msg_type") in (
                    "display_data", "update_display_data"):
                text = (msg.get("content", {}).get("data") or {}).get("text/plain", "")
                m = _RUN_LINE.match(text) if isinstance(text, str) else None
                now = time.monotonic()
                if m and ((m.group(1), m.group(2)) != self.nbtools_last[:2]
                          or now - self.nbtools_last[2] >= _HEARTBEAT_S):
                    # a line when the run's phase changes, else one every 15 s
                    self.nbtools_say(f"  cell {cell_index}: {text}")
                    self.nbtools_last = (m.group(1), m.group(2), now)
            return super().process_message(msg, cell, cell_index)
    return Client


def _ipc_path() -> str | None:
    """A socket path prefix in Jupyter's runtime folder, or None (TCP then) where it would
    pass the 107 bytes a Unix socket's path may have, or the platform has none."""
    import uuid
    if os.name != "posix":
        return None
    from jupyter_core.paths import jupyter_runtime_dir
    folder = jupyter_runtime_dir()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"nbtools-{uuid.uuid4().hex[:12]}-ipc")
    return path if len(path.encode()) + 8 <= 107 else None


def _report_cells(client, nb, say, start) -> None:
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    began = {}

    def on_start(cell, cell_index, **_):
        began[cell_index] = time.monotonic()
        first = (cell.source.strip().splitlines() or [""])[0][:70]
        say(f"cell {cell_index} ({code.index(cell_index) + 1}/{len(code)} code cells, "
            f"{time.monotonic() - start:.0f} s in): {first}")

    def on_done(cell, cell_index, **_):
        took = time.monotonic() - began.get(cell_index, time.monotonic())
        if took >= 1.0:
            say(f"cell {cell_index} done in {took:.1f} s")

    client.nbtools_say = say
    client.on_cell_execute = on_start
    client.on_cell_executed = on_done


def _last_executed(nb) -> int | None:
    done = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.get("outputs")]
    return done[-1] if done else None


class ParametersError(ValueError):
    """-p NAME=VALUE the notebook cannot take: no parameters cell, or a name it does not set."""


def parameter_names(nb) -> tuple[int | None, list[str]]:
    """(index of the cell tagged ``parameters``, the names it assigns at top level:
    a = ..., a: int = ..., a, b = ...)."""
    import ast
    idx = next((i for i, c in enumerate(nb.cells)
                if "parameters" in c.get("metadata", {}).get("tags", [])), None)
    if idx is None:
        return None, []
    try:
        tree = ast.parse(nb.cells[idx].source)
    except SyntaxError:
        return idx, []
    names = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            names += [n.id for n in ast.walk(t) if isinstance(n, ast.Name)]
    return idx, list(dict.fromkeys(names))


def inject_parameters(nb, parameters: dict) -> None:
    """A cell setting ``parameters`` after the one tagged 'parameters'. Names that cell does
    not set are let through here (the tests inject one set of sizes into every notebook);
    a person's ``-p`` is checked first by check_parameters."""
    import nbformat
    idx, _ = parameter_names(nb)
    if idx is None:
        raise ParametersError("the notebook has no cell tagged 'parameters' to override; tag "
                              "the cell that sets the sizes with 'parameters'")
    src = "# injected parameters\n" + "\n".join(f"{k} = {v!r}" for k, v in parameters.items())
    cell = nbformat.v4.new_code_cell(src)
    cell.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(idx + 1, cell)


def check_parameters(nb, parameters: dict) -> None:
    """A person's ``-p NAME=...``: the notebook must have a parameters cell and NAME must be
    set there, else it would be injected and change nothing (a typo runs the defaults for an
    hour). ParametersError says which names and what the cell sets."""
    idx, names = parameter_names(nb)
    if parameters and idx is None:
        raise ParametersError("the notebook has no cell tagged 'parameters' to override; tag "
                              "the cell that sets the sizes with 'parameters'")
    unknown = [k for k in parameters if k not in names]
    if unknown:
        hint = {k: difflib.get_close_matches(k, names, 1) for k in unknown}
        raise ParametersError(", ".join(
            k + (f" (did you mean {hint[k][0]}?)" if hint[k] else "") for k in unknown)
            + f": not set in the notebook's parameters cell (it sets "
            f"{', '.join(names) or 'nothing'}), so it would change nothing")


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
    return _once(_REMOTE_LINK.sub("", body))


def _once(html: str) -> str:
    """Each static figure carries BokehJS (1.3 MB) so that its cell stands alone; in one
    page the first copy serves every figure after it."""
    seen = set()

    def first(m):
        text = m.group(0)
        if len(text) < 10_000:
            return text
        key = hash(text)
        if key in seen:
            return ""
        seen.add(key)
        return text
    return re.sub(r"<script[^>]*>.*?</script>", first, html, flags=re.S)


def export_notebook(path, output=None, execute_first: bool = True, parameters=None,
                    timeout: int = 3600, deadline_s: float | None = None,
                    save_ipynb=None, progress=True, force: bool = False) -> Path:
    """Execute (static figures) and write offline HTML; ``save_ipynb`` also keeps the
    executed notebook (written first, so a failing conversion loses nothing). If execution
    stops early, both are still written, with what ran and a note saying where and why it
    stopped, and then NotebookStopped is raised: a long GPU notebook cut off by its
    deadline keeps its tables. ``progress`` as in ``execute``, on by default: a long
    notebook should not look stuck. Both files carry nbtools' mark and are written whole or
    not at all; an existing file nbtools did not write is refused before the kernel starts
    (FileExistsError naming it) unless ``force``."""
    import nbformat
    path = Path(path)
    out = Path(output) if output else path.with_suffix(".html")
    for what, target in (("output", out), ("save_ipynb", save_ipynb)):
        if target and Path(target).expanduser().resolve() == path.expanduser().resolve():
            raise ConfigError(f"{what} {str(target)!r} is the notebook being exported; writing "
                              "it would replace the notebook. Give another file (-o "
                              f"{path.with_suffix('.html').name})")
        why = output_refusal(target, "force=True", inputs=[path], force=force) if target \
            else ""
        if why:
            raise FileExistsError(why)
    if not execute_first:
        write_file(out, mark_html(to_html(read_notebook(path)), "nbtools export"))
        return out
    stopped = None
    try:
        nb = execute(path, parameters, timeout, static=True, deadline_s=deadline_s,
                     progress=progress)
    except NotebookStopped as e:
        stopped, nb = e, e.nb
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(
            f"**Incomplete export.** {e} Cells above that point ran and show their "
            "outputs; cells after it did not run."))
    if save_ipynb:
        nb.metadata[NOTEBOOK_MARK] = "nbtools export --save-ipynb"   # a later export may replace it
        with atomic_path(save_ipynb) as tmp:
            nbformat.write(nb, str(tmp))
        del nb.metadata[NOTEBOOK_MARK]
    write_file(out, mark_html(to_html(nb), "nbtools export"))
    if stopped is not None:
        stopped.output = out
        raise stopped
    return out
