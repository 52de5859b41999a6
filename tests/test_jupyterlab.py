"""The panel in real JupyterLab, driven by headless Chromium: open a notebook on the
torch-nbtools kernel, run its cells, click Run, flip compile, click Run again, and check
that the Bokeh timeline in the page was patched with the new run's data.

Needs /usr/bin/chromium (Debian's chromium package). Without it this test FAILS: a panel
nobody has seen render is not tested. Takes about 1-2 minutes on 2 cores.
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
from browser import ARTIFACTS, launch as _launch  # noqa: E402
CELLS = ["from nbtools import Lab, StepConfig",
         "lab = Lab(n=2, history=None)",
         "p = lab.panel(); p"]

# The main timeline's view in BokehJS: its title names the run shown; its events source
# is the one with a "hatch" column. The view is tagged so a later call can tell whether
# the same view (patched) or a new one (re-rendered) shows the next run.
TIMELINE = """(runId) => {
  if (!window.Bokeh || !Bokeh.index) return null;
  const events = v => v.model.renderers.find(r => r.data_source && r.data_source.data.hatch);
  const pv = [...Bokeh.index.all_views()].find(v => v.frame && v.model.title
      && v.model.title.text.includes(runId) && events(v));
  if (!pv) return null;
  const d = events(pv).data_source.data;
  const marks = pv.model.renderers.find(r => r.data_source && r.data_source.data.marker);
  const tagged = pv.__nbtools_tag === true;
  pv.__nbtools_tag = true;
  return {title: pv.model.title.text, boxes: d.left.length, tagged: tagged,
          events: [...d.count].reduce((a, b) => a + b, 0),
          lanes: [...new Set([...d.lane].map(l => l.split(" ")[0]))].sort(),
          compile_marks: marks ? marks.data_source.data.x.length : -1};
}"""


# Every text the status widget shows, recorded in the page (a run can be over in a second).
WATCH_STATUS = """() => {
  window.__nbtools_status = [];
  const el = document.querySelector(".nbtools-status");
  new MutationObserver(() => window.__nbtools_status.push(el.textContent))
      .observe(el, {childList: true, subtree: true, characterData: true});
}"""



def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _notebook(path: Path) -> None:
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "torch-nbtools", "display_name": "torch-nbtools",
                                 "language": "python"}
    nbformat.write(nb, path)


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
        Returns the pids that had to be killed."""
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
        _, alive = psutil.wait_procs(tree, timeout=20)
        for p in alive:            # only processes this server started, by pid
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self.log.close()
        return [p.pid for p in alive]


def _wait_status(page, pattern, timeout_s, not_id=None):
    """Wait until the panel's status matches ``pattern`` (a run id group) and returns a
    run id other than ``not_id``; fail with the status and error box if it does not."""
    deadline = time.monotonic() + timeout_s
    status = page.locator(".nbtools-status")
    text = ""
    while time.monotonic() < deadline:
        text = status.inner_text()
        m = re.search(pattern, text)
        if m and m.group(1) != not_id:
            return m.group(1)
        if "failed" in text or "not run" in text:
            break
        page.wait_for_timeout(500)
    err = page.locator(".nbtools-error").inner_text()
    raise AssertionError(f"no finished run in the panel: status {text!r}, error box {err!r}")


def _check_kernelspec() -> None:
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    try:
        KernelSpecManager().get_kernel_spec("torch-nbtools")
    except NoSuchKernel:
        pytest.fail("Jupyter kernel 'torch-nbtools' is not installed in this environment: "
                    "python -m nbtools kernel install --sys-prefix (dev.py test does this)")


def test_panel_in_jupyterlab(tmp_path):
    from playwright.sync_api import sync_playwright

    _check_kernelspec()

    with sync_playwright() as pw:
        browser = _launch(pw)       # before the server: a missing Chromium fails at once
        server = _Server(tmp_path)
        killed = None
        try:
            _notebook(server.root / "panel.ipynb")
            server.wait()
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{server.base}/lab/tree/panel.ipynb?token={server.token}")
            page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=90_000)
            # the kernel from the notebook's metadata, not a chooser dialog
            page.get_by_text("torch-nbtools", exact=True).first.wait_for(timeout=30_000)
            page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
            page.locator(".lm-Menu-item", has_text="Run All Cells").first.click()

            run_button = page.locator("button.nbtools-run")
            run_button.wait_for(timeout=150_000)          # kernel + Lab(n=2) start
            page.evaluate(WATCH_STATUS)
            run_button.click()
            first = _wait_status(page, r"#([0-9a-f]{8}) done", 120)
            page.wait_for_function(f"() => ({TIMELINE})('{first}') !== null", timeout=30_000)
            shown = page.evaluate("() => window.__nbtools_status")
            assert any("running… (compiling happens in warm-up)" in t for t in shown), shown
            a = page.evaluate(TIMELINE, first)
            assert a["lanes"] == ["r0", "r1"] and a["boxes"] > 0 and a["events"] > 0, a
            assert a["compile_marks"] == 0, a                 # eager: nothing compiled
            summary = page.locator(".nbtools-summary").inner_text()
            assert first in summary and "step_ms" in summary

            page.locator(".nbtools-compile select").select_option("default")
            page.locator(".nbtools-backend select").select_option("eager")
            page.wait_for_timeout(500)       # let the widget values reach the kernel
            run_button.click()
            second = _wait_status(page, r"#([0-9a-f]{8}) done", 150, not_id=first)
            page.wait_for_function(f"() => ({TIMELINE})('{second}') !== null", timeout=30_000)
            b = page.evaluate(TIMELINE, second)
            assert b["tagged"], "the timeline was re-rendered instead of patched in place"
            assert second in b["title"] and first not in b["title"], b
            assert b["lanes"] == ["r0", "r1"] and b["events"] > 0, b
            assert b["compile_marks"] > 0, b                  # the compiled run's compiles
            assert (b["boxes"], b["events"]) != (a["boxes"], a["events"]) or \
                b["compile_marks"] != a["compile_marks"]
            summary = page.locator(".nbtools-summary").inner_text()
            assert second in summary and "compile=default" in summary

            page.locator(".nbtools-timeline").scroll_into_view_if_needed()
            page.wait_for_timeout(500)
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "jupyterlab_panel.png"))
            assert not [e for e in errors if "Bokeh" in e or "nbtools" in e], errors
        except BaseException:
            print(server.tail(), file=sys.stderr)
            raise
        finally:
            browser.close()
            killed = server.stop()
    assert killed == [], f"processes left after the kernel shutdown had to be killed: {killed}"

