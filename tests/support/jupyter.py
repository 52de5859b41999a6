"""Real JupyterLab for the browser tests: one server per test process (each pytest-xdist
worker), started by the first test that needs it and stopped when the session ends
(conftest.py's pytest_sessionfinish), with this checkout's JupyterLab extension. Each test
gets a Space on it: a folder of its own under the server's root and a JupyterLab workspace
of its own, so its pages open only its notebooks; when the test ends its kernels are shut
down through the REST API and every process they started must have ended by itself.

The pages: a fresh JupyterLab page on one notebook (Page) or another tab on it (Tab), the
panel's page (panel_page), its status line (wait_status), the Log Console, the saved file's
pictures. Needs /usr/bin/chromium and the 'torch-nbtools' kernel (dev.py test installs both);
without them a test FAILS."""
from __future__ import annotations

import base64
import io
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from support.browser import ARTIFACTS, LABEXT, launch

# the interpreter whose JupyterLab the tests start (NBTOOLS_PYTHON: another venv's)
PYTHON = os.environ.get("NBTOOLS_PYTHON", sys.executable)
RANKS = [0, 1]
# a saved notebook past this holds what it should not (BokehJS, every event of a run)
MAX_SAVED = 2_000_000
# the mime type of a figure's saved output (the extension renders it)
FIGURE_MIME = "application/vnd.nbtools.figure.v1+json"
SHOTS = Path("/tmp/panel-shots")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(base, token, path, method="GET"):
    """One call of the server's REST API; its JSON answer (None when empty)."""
    req = urllib.request.Request(f"{base}{path}", method=method,
                                 headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
    return json.loads(body) if body else None


class Server:
    """JupyterLab on a free port with its own config, runtime, settings and workspaces
    folders under ``tmp``, and its own JUPYTER_PATH holding this checkout's extension (the
    venv's link may point at another checkout)."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.port, self.token = free_port(), secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        self.root = tmp / "root"
        self.root.mkdir()
        env = dict(os.environ, PYTHONUNBUFFERED="1", JUPYTER_PATH=str(tmp / "jpath"))
        for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                         ("JUPYTERLAB_SETTINGS_DIR", "settings"),
                         ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"), ("IPYTHONDIR", "ipython")):
            env[var] = str(tmp / sub)
        ext = tmp / "jpath" / "labextensions"
        ext.mkdir(parents=True)
        (ext / "torch-nbtools").symlink_to(os.path.realpath(LABEXT), target_is_directory=True)
        # no "get Jupyter news?" toast over the screenshot
        news = tmp / "settings" / "@jupyterlab" / "apputils-extension"
        news.mkdir(parents=True)
        (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
        self.log_path = tmp / "jupyter.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "jupyter", "lab", "--no-browser", f"--port={self.port}",
             "--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0",
             f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
             "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
            + (["--allow-root"] if os.geteuid() == 0 else []),
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def wait(self, timeout=60.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"jupyter lab exited ({self.proc.returncode}):\n{self.tail()}")
            try:
                api(self.base, self.token, "/api/status")
                return
            except OSError:
                time.sleep(0.5)
        raise AssertionError(f"jupyter lab did not answer in {timeout:.0f} s:\n{self.tail()}")

    def tail(self, n=4000) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-n:]

    def descendants(self) -> set:
        """The pids of every process below the server now (kernels, their labs' engines)."""
        import psutil
        try:
            return {p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            return set()

    def end_kernels(self, kept: set = frozenset()) -> list:
        """Shut every session and kernel down through the REST API (a kernel's exit stops
        its lab's engines) and wait for the processes below the server, other than
        ``kept``, to end. Returns those (pid, command) that had to be killed, by pid."""
        import psutil
        procs = []
        for pid in self.descendants() - set(kept):
            try:
                procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        try:
            for s in api(self.base, self.token, "/api/sessions"):
                api(self.base, self.token, f"/api/sessions/{s['id']}", method="DELETE")
            for k in api(self.base, self.token, "/api/kernels"):
                api(self.base, self.token, f"/api/kernels/{k['id']}", method="DELETE")
        except OSError:
            pass
        _, alive = psutil.wait_procs(procs, timeout=30)
        left = []
        for p in alive:            # only processes this server started, by pid
            try:
                left.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
                p.kill()
            except psutil.NoSuchProcess:
                pass
        return left

    def stop(self) -> list:
        """End the kernels, stop the server, then end any process it started that is still
        alive. Returns the processes (pid, command) that had to be killed."""
        left = self.end_kernels() if self.proc.poll() is None else []
        import psutil
        tree = self.descendants()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        for pid in tree:
            try:
                p = psutil.Process(pid)
                left.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self.log.close()
        return left


class Space:
    """One test's part of the shared server: ``root`` is its own folder under the server's
    root (where it writes notebooks) and ``url(name)`` opens a notebook in a JupyterLab
    workspace of its own (a page restores no other test's tabs, nor starts their kernels)."""

    def __init__(self, server: Server, name: str):
        self.server, self.name = server, name
        self.base, self.token = server.base, server.token
        self.root = server.root / name
        self.root.mkdir()

    def url(self, notebook: str) -> str:
        return (f"{self.base}/lab/workspaces/{self.name}/tree/{self.name}/{notebook}"
                f"?token={self.token}")

    def tail(self, n=4000) -> str:
        return self.server.tail(n)


_SHARED: Server | None = None


def shared_server() -> Server:
    """This process's JupyterLab, started at the first call (and again if it died)."""
    global _SHARED
    if _SHARED is None or _SHARED.proc.poll() is not None:
        server = Server(Path(tempfile.mkdtemp(prefix="nbtools-tests-jupyter-")))
        server.wait()
        _SHARED = server
    return _SHARED


def stop_shared() -> list:
    """Stop this process's JupyterLab if one was started; the processes that had to be
    killed."""
    global _SHARED
    server, _SHARED = _SHARED, None
    if server is None:
        return []
    try:
        return server.stop()
    finally:
        shutil.rmtree(server.tmp, ignore_errors=True)


def check_kernelspec() -> None:
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    try:
        KernelSpecManager().get_kernel_spec("torch-nbtools")
    except NoSuchKernel:
        pytest.fail("Jupyter kernel 'torch-nbtools' is not installed in this environment: "
                    "python -m nbtools kernel install --sys-prefix (dev.py test does this)")


def serve(tmp_path, test):
    """Run ``test(browser, space)`` on this process's JupyterLab and a fresh Chromium; then
    end the test's kernels and check that nothing they started had to be killed."""
    from playwright.sync_api import sync_playwright
    check_kernelspec()
    with sync_playwright() as pw:
        browser = launch(pw)       # before the server: a missing Chromium fails at once
        server = shared_server()
        before = server.descendants()
        space = Space(server, tmp_path.name)
        try:
            test(browser, space)
        except BaseException:
            print(server.tail(), file=sys.stderr)
            ARTIFACTS.mkdir(exist_ok=True)
            for i, pg in enumerate(p for c in browser.contexts for p in c.pages):
                pg.screenshot(path=str(ARTIFACTS / f"failure-{i}.png"))
            raise
        finally:
            browser.close()
            killed = server.end_kernels(before)
    assert killed == [], f"processes left after the kernel shutdown had to be killed: {killed}"


def write_notebook(path: Path, cells=None, source: Path | None = None, parameters=None) -> None:
    import nbformat
    from nbtools.report.notebook import inject_parameters
    if source is not None:
        nb = nbformat.read(str(source), as_version=4)
    else:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
        nb.metadata["kernelspec"] = {"name": "torch-nbtools", "display_name": "torch-nbtools",
                                     "language": "python"}
    if parameters:
        inject_parameters(nb, parameters)
    nbformat.write(nb, str(path))


class Page:
    """A fresh JupyterLab page on one notebook; records every page error and every error
    a widget or output shows."""

    def __init__(self, browser, server, name: str, width: int = 1500):
        self.server, self.name = server, name
        self.page = browser.new_page(viewport={"width": width, "height": 1100})
        self.errors = []
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.on("console", lambda m: self.errors.append(f"console: {m.text}")
                     if m.type == "error" and re.search(r"bokeh|require|widget", m.text, re.I)
                     else None)
        self.page.goto(server.url(name))
        self.page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=90_000)
        # the kernel from the notebook's metadata, not a chooser dialog, started and idle
        self.page.get_by_text("torch-nbtools", exact=True).first.wait_for(timeout=30_000)
        self.page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").first \
            .wait_for(timeout=90_000)

    def menu(self, top: str, item: str) -> None:
        self.page.locator(".lm-MenuBar-item", has_text=re.compile(f"^{top}$")).click()
        self.page.locator(".lm-Menu-item", has_text=item).first.click()

    def run_all(self, timeout_s: float) -> None:
        """Run All and wait until every code cell has run; fail on a stopped notebook."""
        self.menu("Run", "Run All Cells")
        prompts = self.page.locator(".jp-CodeCell .jp-InputPrompt")
        deadline, started = time.monotonic() + timeout_s, False
        texts = []
        while time.monotonic() < deadline:
            # textContent: cells scrolled out of view have no innerText (content-visibility)
            texts = [t.strip() for t in prompts.evaluate_all("els => els.map(e => e.textContent)")]
            started = started or any("*" in t for t in texts)
            if texts and all(re.fullmatch(r"\[\d+\]:", t) for t in texts):
                return
            if started and not any("*" in t for t in texts):
                break                                   # stopped before the end
            self.page.wait_for_timeout(1000)
        raise AssertionError(f"{self.name}: Run All did not finish: prompts {texts}\n"
                             + "\n".join(self.outputs()[-5:]))

    def run_cell(self, index: int) -> None:
        cell = self.page.locator(".jp-CodeCell").nth(index)
        cell.locator(".jp-InputPrompt").click()
        self.page.keyboard.press("Shift+Enter")

    def outputs(self) -> list:
        return self.page.locator(".jp-OutputArea-output").evaluate_all(
            "els => els.map(e => e.textContent)")

    def assert_no_errors(self) -> None:
        shown = [t[:300] for t in self.outputs()
                 if re.search(r"javascript error|Error displaying widget|Traceback", t, re.I)]
        assert not self.errors and not shown, (self.errors, shown)

    def save(self) -> int:
        """Save from the page (what autosave writes); returns the file's size."""
        self.page.locator(".jp-Notebook").first.click(position={"x": 5, "y": 5})
        self.page.keyboard.press("Control+s")
        path = self.server.root / self.name
        before = path.stat().st_mtime_ns
        for i in range(120):      # 30 s: a loaded CI box once took longer than 10
            self.page.wait_for_timeout(250)
            if path.stat().st_mtime_ns != before:
                break
            if i == 40:           # the keystroke may have landed while a widget held focus
                self.page.locator(".jp-Notebook").first.click(position={"x": 5, "y": 5})
                self.page.keyboard.press("Control+s")
        else:
            raise AssertionError(f"{self.name} was not saved from the page")
        return path.stat().st_size

    def shot(self, stage: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{self.name.split('.')[0]}-{stage}.png"))


def panel_page(browser, server, name: str, cells: list, width: int = 1500):
    """A fresh page on a new notebook of ``cells``, its first two run (they start the Lab
    and show the panel); returns the _Page and the panel's Run button once it is drawn."""
    write_notebook(server.root / name, cells)
    page = Page(browser, server, name, width=width)
    page.run_cell(0)
    page.run_cell(1)
    run_button = page.page.locator("button.nbtools-run").first
    run_button.wait_for(timeout=150_000)          # kernel + Lab start
    return page, run_button


def wait_status(page, pattern, timeout_s, not_id=None):
    """Wait until the panel's status matches ``pattern`` (a run id group) and returns a
    run id other than ``not_id``; fail with the status and error box if it does not."""
    deadline = time.monotonic() + timeout_s
    status = page.locator(".nbtools-status").first
    text = ""
    while time.monotonic() < deadline:
        text = status.inner_text()
        m = re.search(pattern, text)
        if m and m.group(1) != not_id:
            return m.group(1)
        if "failed" in text or "not run" in text:
            break
        page.wait_for_timeout(500)
    err = page.locator(".nbtools-error").first.inner_text()
    raise AssertionError(f"no finished run in the panel: status {text!r}, error box {err!r}")


def wait_title(page, run_id, timeout_s=30):
    """Wait until a drawn timeline names ``run_id`` in its title."""
    page.wait_for_function(
        "(id) => window.Bokeh && [...Bokeh.index.all_views()].some(v => v.frame && v.el.isConnected"
        " && v.model.title && v.model.title.text.includes(id))", arg=run_id,
        timeout=timeout_s * 1000)



class Tab(Page):
    """Another tab on a notebook that is already open (its kernel is running: no chooser,
    and the kernel's name also shows, hidden, in the running-sessions list)."""

    def __init__(self, browser, server, name: str):
        self.server, self.name, self.errors = server, name, []
        self.page = browser.new_page(viewport={"width": 1500, "height": 1100})
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.goto(server.url(name))
        self.page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=90_000)




def shot(page, stage: str) -> None:
    """The page's screenshot in artifacts/, and in /tmp/panel-shots when that folder exists
    (a person looking at the panel's states during a session)."""
    page.shot(stage)
    if SHOTS.is_dir():
        shutil.copy(ARTIFACTS / f"{page.name.split('.')[0]}-{stage}.png", SHOTS)


def log_console(pg) -> list:
    """The entries JupyterLab's Log Console shows at its level."""
    return pg.locator(".jp-LogConsolePanel .jp-OutputArea-output").evaluate_all(
        "els => els.map(e => e.textContent)")


def open_log_console(pg) -> None:
    """View > Show Log Console, and wait until it shows."""
    pg.locator(".lm-MenuBar-item", has_text=re.compile("^View$")).click()
    pg.locator(".lm-Menu-item", has_text="Show Log Console").first.click()
    pg.locator(".jp-LogConsolePanel").first.wait_for(timeout=30_000)


def log_level(pg, level: str) -> None:
    """Set the Log Console's level (what it shows)."""
    pg.locator(".jp-LogConsolePanel").first.locator("xpath=..").locator("select").first \
        .select_option(level)


def pictures(path) -> list:
    """(what, the text its PNG carries, width) of each saved figure output, in order."""
    from PIL import Image
    nb = json.loads(path.read_text())
    out = []
    for c in nb["cells"]:
        for o in c.get("outputs", []):
            d = o.get("data", {})
            if FIGURE_MIME in d:
                png = d["image/png"]
                img = Image.open(io.BytesIO(base64.b64decode(
                    "".join(png) if isinstance(png, list) else png)))
                out.append((d[FIGURE_MIME]["what"], img.text.get("Description", ""), img.width))
    return out



# Every control of the panel: clipped (its label cut, or past the output area's right edge)?
CLIPPED = """() => {
  const area = document.querySelector('.jp-OutputArea-output').getBoundingClientRect();
  const out = [];
  for (const el of document.querySelectorAll('[class*="nbtools-"]')) {
    const name = [...el.classList].find(c => c.startsWith('nbtools-'));
    const r = el.getBoundingClientRect();
    for (const d of [el, ...el.querySelectorAll('*')]) {     // any text cut with an ellipsis
      if (d.clientWidth && getComputedStyle(d).textOverflow === 'ellipsis'
          && d.scrollWidth > d.clientWidth + 1) {
        out.push(name + ': text cut: ' + (d.textContent || '').trim().slice(0, 40)); break; }
    }
    let scrolls = false;       // inside a box that scrolls sideways: reachable, not cut
    for (let a = el.parentElement; a && !scrolls; a = a.parentElement)
      scrolls = ['auto', 'scroll'].includes(getComputedStyle(a).overflowX)
                && a.getBoundingClientRect().right <= area.right + 1;
    if (r.width && r.right > area.right + 1 && !scrolls) out.push(name + ': past the right edge');
  }
  return out;
}"""


