"""The notebooks as a person sees them, in real JupyterLab driven by headless Chromium,
each test from a fresh page: Run All of 01 (at the tests' CPU sizes; 00-quickstart's is
test_notebook_document's), and the panel (Run, flip compile, Run, pick the first run in the history, Compare). After
each step every Bokeh figure must be drawn: no JavaScript error, every rank's lanes hold
coloured boxes on the screenshot (tests/browser.py), and the y-range covers every lane in
BokehJS's state. The saved notebook must stay small (BokehJS is not written into it).

Needs /usr/bin/chromium (Debian's chromium package). Without it these tests FAIL. Slow on
2 cores: real engines run every notebook. Screenshots land in artifacts/.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

PYTHON = os.environ.get("NBTOOLS_PYTHON", sys.executable)
from browser import ARTIFACTS, check_plots_drawn, launch as _launch  # noqa: E402
from test_notebooks import NOTEBOOKS, _errors, small  # noqa: E402  (the sizes every test uses)

pytestmark = pytest.mark.slow   # a JupyterLab server, kernels with labs, Chromium

RANKS = [0, 1]
MAX_SAVED = 2_000_000
PANEL_CELLS = [
    "from nbtools import Lab, StepConfig\nlab = Lab(n=2, history=None)",
    "p = lab.panel(); p",
    # a second panel and three plots, for the size of the saved notebook
    "h = lab.history\ndisplay(lab.panel(), h[0].plot(), h[1].plot(),"
    " lab.compare(h[0], h[1]).plot())",
    # as every tutorial ends (a kernel stopped on a loaded machine can be killed before
    # ipyparallel's exit hook stops the engines; that path is not this test's)
    "lab.close()"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(base, token, path, method="GET"):
    req = urllib.request.Request(f"{base}{path}", method=method,
                                 headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
    return json.loads(body) if body else None


class _Server:
    """JupyterLab on a free port with its own config, runtime and settings folders."""

    def __init__(self, tmp: Path):
        self.port, self.token = _free_port(), secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        self.root = tmp / "root"
        self.root.mkdir()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                         ("JUPYTERLAB_SETTINGS_DIR", "settings"),
                         ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"), ("IPYTHONDIR", "ipython")):
            env[var] = str(tmp / sub)
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
                _api(self.base, self.token, "/api/status")
                return
            except OSError:
                time.sleep(0.5)
        raise AssertionError(f"jupyter lab did not answer in {timeout:.0f} s:\n{self.tail()}")

    def tail(self, n=4000) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-n:]

    def stop(self) -> list:
        """Shut kernels down through the REST API (the kernel's exit stops the lab's
        engines), stop the server, then end any process it started that is still alive.
        Returns the processes (pid, command) that had to be killed."""
        import psutil
        try:
            tree = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        try:
            for k in _api(self.base, self.token, "/api/kernels"):
                _api(self.base, self.token, f"/api/kernels/{k['id']}", method="DELETE")
        except OSError:
            pass
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        _, alive = psutil.wait_procs(tree, timeout=30)
        left = []
        for p in alive:            # only processes this server started, by pid
            try:
                left.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self.log.close()
        return left



def _check_kernelspec() -> None:
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    try:
        KernelSpecManager().get_kernel_spec("torch-nbtools")
    except NoSuchKernel:
        pytest.fail("Jupyter kernel 'torch-nbtools' is not installed in this environment: "
                    "python -m nbtools kernel install --sys-prefix (dev.py test does this)")




def _write(path: Path, cells=None, source: Path | None = None, parameters=None) -> None:
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


class _Page:
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
        self.page.goto(f"{server.base}/lab/tree/{name}?token={server.token}")
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


def _panel_page(browser, server, name: str, cells: list, width: int = 1500):
    """A fresh page on a new notebook of ``cells``, its first two run (they start the Lab
    and show the panel); returns the _Page and the panel's Run button once it is drawn."""
    _write(server.root / name, cells)
    page = _Page(browser, server, name, width=width)
    page.run_cell(0)
    page.run_cell(1)
    run_button = page.page.locator("button.nbtools-run").first
    run_button.wait_for(timeout=150_000)          # kernel + Lab start
    return page, run_button


def _wait_status(page, pattern, timeout_s, not_id=None):
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


def _titles(page, run_id, timeout_s=30):
    """Wait until a drawn timeline names ``run_id`` in its title."""
    page.wait_for_function(
        "(id) => window.Bokeh && [...Bokeh.index.all_views()].some(v => v.frame && v.el.isConnected"
        " && v.model.title && v.model.title.text.includes(id))", arg=run_id,
        timeout=timeout_s * 1000)


def _serve(tmp_path, test):
    from playwright.sync_api import sync_playwright
    _check_kernelspec()
    with sync_playwright() as pw:
        browser = _launch(pw)       # before the server: a missing Chromium fails at once
        server = _Server(tmp_path)
        try:
            server.wait()
            test(browser, server)
        except BaseException:
            print(server.tail(), file=sys.stderr)
            ARTIFACTS.mkdir(exist_ok=True)
            for i, pg in enumerate(p for c in browser.contexts for p in c.pages):
                pg.screenshot(path=str(ARTIFACTS / f"failure-{i}.png"))
            raise
        finally:
            browser.close()
            killed = server.stop()
    assert killed == [], f"processes left after the kernel shutdown had to be killed: {killed}"


@pytest.mark.timeout(900)
# 00-quickstart's Run All is test_notebook_document's first half (with these checks)
@pytest.mark.parametrize("stem", ["01-cuda-graphs-tp-inference"])
def test_notebook_run_all_draws_every_figure(stem, tmp_path):
    def test(browser, server):
        name = f"{stem}.ipynb"
        _write(server.root / name, source=NOTEBOOKS / name, parameters=small(tmp_path))
        page = _Page(browser, server, name)
        page.run_all(timeout_s=700)
        page.page.wait_for_timeout(2000)
        page.assert_no_errors()
        plots = check_plots_drawn(page.page, stem, RANKS, min_plots=2)
        assert any(p["timeline"] for p in plots), plots
        page.shot("run-all")
        size = page.save()
        assert size < MAX_SAVED, f"saved {name} is {size / 1e6:.1f} MB"
        # test_notebooks' headless checks, on what the page saved (01 runs only here)
        import nbformat
        saved = nbformat.read(str(server.root / name), as_version=4)
        assert not _errors(saved), _errors(saved)
        skipped = [i for i, c in enumerate(saved.cells)
                   if c.cell_type == "code" and c.execution_count is None]
        assert not skipped, f"cells not run: {skipped}"
        assert any((tmp_path / "runs").glob("*/run.json")), "no run saved under HISTORY"
    _serve(tmp_path, test)


@pytest.mark.timeout(900)
def test_panel_draws_after_every_action(tmp_path):
    def test(browser, server):
        _write(server.root / "panel.ipynb", PANEL_CELLS)
        page = _Page(browser, server, "panel.ipynb")
        pg = page.page
        page.run_cell(0)
        page.run_cell(1)
        run_button = pg.locator("button.nbtools-run").first
        run_button.wait_for(timeout=150_000)          # kernel + Lab(n=2) start
        assert pg.evaluate("() => window.Bokeh !== undefined"), "BokehJS is not in the page"

        run_button.click()
        first = _wait_status(pg, r"#([0-9a-f]{8}) done", 150)
        _titles(pg, first)
        check_plots_drawn(pg, "panel-run1", RANKS, min_plots=2)

        pg.locator(".nbtools-compile select").first.select_option("default")
        pg.locator(".nbtools-backend select").first.select_option("eager")
        pg.wait_for_timeout(500)       # let the widget values reach the kernel
        run_button.click()
        second = _wait_status(pg, r"#([0-9a-f]{8}) done", 200, not_id=first)
        _titles(pg, second)
        check_plots_drawn(pg, "panel-run2", RANKS, min_plots=2)
        summary = pg.locator(".nbtools-summary").first.inner_text()
        assert second in summary and "compile=default" in summary, summary

        pg.locator(".widget-select select").first.select_option(index=0)     # the history
        _wait_status(pg, r"showing run #([0-9a-f]{8}) from the history", 30, not_id=second)
        _titles(pg, first)
        check_plots_drawn(pg, "panel-history", RANKS, min_plots=2)

        pg.get_by_role("button", name="Compare A / B").first.click()
        pg.wait_for_function("() => [...Bokeh.index.all_views()].filter(v => v.frame && "
                             "v.el.isConnected && v.model.title && /^[AB] /.test("
                             "v.model.title.text)).length >= 2", timeout=60_000)
        plots = check_plots_drawn(pg, "panel-compare", RANKS, min_plots=5)
        assert sum(p["timeline"] for p in plots) >= 3, plots     # panel's, A's and B's
        pg.locator(".nbtools-timeline").first.scroll_into_view_if_needed()
        page.shot("compare")
        page.assert_no_errors()

        page.run_cell(2)                  # a second panel and three more plots
        # shown plots only: a run without memory=True hides its memory lane
        pg.wait_for_function("() => [...Bokeh.index.all_views()].filter(v => v.frame && "
                             "v.el.isConnected && v.model.visible).length >= 17",
                             timeout=60_000)
        check_plots_drawn(pg, "panel-more", RANKS, min_plots=17)
        page.assert_no_errors()
        size = page.save()
        assert size < MAX_SAVED, f"saved panel.ipynb is {size / 1e6:.1f} MB"
        page.run_cell(3)
        page.page.wait_for_function("() => /\\[\\d+\\]/.test([...document.querySelectorAll("
                                    "'.jp-CodeCell .jp-InputPrompt')][3].textContent)",
                                    timeout=120_000)
    _serve(tmp_path, test)


# Every control of the panel: clipped (its label cut, or past the output area's right edge)?
_CLIPPED = """() => {
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


# the text of the elements matched that does not fit them (wider than their box)
_CUT = """(sel) => [...document.querySelectorAll(sel)].flatMap(el => [el, ...el.querySelectorAll('*')])
  .filter(d => d.clientWidth && d.scrollWidth > d.clientWidth + 1)
  .map(d => (d.textContent || '').trim().slice(0, 60))"""


@pytest.mark.timeout(900)
def test_panel_fits_1280_and_marks_what_the_lab_would_refuse(tmp_path):
    """Issue 26 in a real JupyterLab page 1280 px wide: no control clipped, every default
    shown as 'default', a choice the lab would refuse marked with its reason on hover, Run
    disabled (reason on hover) while the controls hold such a config, and Export listing
    this panel's run."""
    def test(browser, server):
        _write(server.root / "fit.ipynb", PANEL_CELLS[:2] + [PANEL_CELLS[-1]])
        page = _Page(browser, server, "fit.ipynb", width=1280)
        pg = page.page
        page.run_cell(0)
        page.run_cell(1)
        run_button = pg.locator("button.nbtools-run").first
        run_button.wait_for(timeout=150_000)
        pg.wait_for_timeout(1000)
        assert pg.evaluate(_CLIPPED) == []
        for field in ("parallel", "seq_schedule"):
            assert pg.locator(f".nbtools-{field} select").first.input_value() == "default"
        for field in ("batch", "seq_len"):
            assert pg.locator(f".nbtools-{field} input").first.input_value() == "default"
        # (ipywidgets writes an option's spaces as no-break spaces)
        options = [t.replace("\xa0", " ") for t in
                   pg.locator(".nbtools-cudagraph option").all_inner_texts()]
        assert options == ["off", "✗ manual"], options        # CPU ranks: needs CUDA
        # the reasons on hover: over the control's name (ipywidgets shows no tooltip on a
        # described dropdown)
        assert "needs CUDA" in pg.locator(".nbtools-cudagraph .widget-label span[title]").first.get_attribute("title")
        pg.locator(".nbtools-cudagraph select").first.select_option(index=1)
        pg.wait_for_function("() => document.querySelector('button.nbtools-run').disabled",
                             timeout=30_000)
        assert "needs CUDA" in run_button.get_attribute("title")
        # issue 54: the reason shows beside Run, whole, not only on hover
        reason = pg.locator(".nbtools-refused-reason").first
        assert reason.is_visible()
        assert "cudagraph='manual' needs CUDA" in reason.inner_text(), reason.inner_text()
        assert pg.evaluate(_CUT, ".nbtools-refused-reason") == []
        # and every checkbox's hover text is words, not markup
        titles = pg.evaluate("""() => [...document.querySelectorAll(
            '.widget-checkbox [title]')].map(e => e.getAttribute('title'))""")
        assert titles and not [t for t in titles if "<" in t or "style=" in t], titles
        page.shot("refused-1280")
        pg.locator(".nbtools-cudagraph select").first.select_option(index=0)
        pg.wait_for_function("() => !document.querySelector('button.nbtools-run').disabled",
                             timeout=30_000)
        run_button.click()
        run_id = _wait_status(pg, r"#([0-9a-f]{8}) done", 150)
        picked = pg.locator(".nbtools-export-runs select option:checked").all_inner_texts()
        assert len(picked) == 1 and run_id in picked[0], picked
        assert pg.evaluate(_CLIPPED) == []
        pg.locator(".nbtools-run").first.scroll_into_view_if_needed()
        page.shot("ran-1280")
        page.assert_no_errors()
        page.run_cell(2)
    _serve(tmp_path, test)
