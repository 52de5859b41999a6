"""Headless Debian Chromium for the browser tests (Playwright's own browser download cannot
work offline), and what "a Bokeh figure is drawn" means in a page. A missing Chromium fails
the test; it never skips."""
from __future__ import annotations

import atexit
import contextlib
import io
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from support.paths import ARTIFACTS, ROOT

CHROMIUM = os.environ.get("NBTOOLS_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]
# What Playwright 1.65 gives a headless Chromium it launches (its chromiumSwitches and
# headless arguments), for the Chromium started here to render as one Playwright starts:
# sRGB colours (the pixel checks), no scrollbars, a second tab not throttled in the
# background, no hover-capable pointer.
PLAYWRIGHTS = [
    "--disable-field-trial-config", "--disable-background-timer-throttling",
    "--disable-backgrounding-occluded-windows", "--disable-back-forward-cache",
    "--disable-breakpad", "--disable-component-extensions-with-background-pages",
    "--no-default-browser-check", "--disable-default-apps", "--disable-dev-shm-usage",
    "--disable-extensions",
    "--disable-features=AvoidUnnecessaryBeforeUnloadCheckSync,DestroyProfileOnBrowserClose,"
    "HttpsUpgrades,HttpsFirstBalancedModeAutoEnable,LensOverlay,MediaRouter,PaintHolding,"
    "ThirdPartyStoragePartitioning,AvoidCorsURLLoaderRestartOnRedirect,OptimizationHints,"
    "NetworkTimeServiceQuerying,AimEnabled,PreconnectToSearch",
    "--enable-features=CDPScreenshotNewSurface", "--allow-pre-commit-input",
    "--disable-hang-monitor", "--disable-ipc-flooding-protection", "--disable-popup-blocking",
    "--disable-prompt-on-repost", "--disable-renderer-backgrounding",
    "--force-color-profile=srgb", "--metrics-recording-only", "--password-store=basic",
    "--use-mock-keychain", "--no-service-autorun", "--disable-search-engine-choice-screen",
    "--enable-unsafe-swiftshader", "--hide-scrollbars", "--mute-audio",
    "--blink-settings=primaryHoverType=2,availableHoverTypes=2,primaryPointerType=4,"
    "availablePointerTypes=4"]


def _missing(path: str) -> None:
    if not Path(path).exists():
        pytest.fail(f"Chromium not found at {path}: install it (apt-get install chromium) "
                    "or point NBTOOLS_CHROMIUM at a Chromium binary. This test does not skip.")


class _Chromium:
    """One headless Chromium for this test process (each pytest-xdist worker), which every
    browser test connects to over CDP: a test's pages are its own (a browser context each,
    closed when it disconnects). Started at the first test that needs it, ended by pid when
    the session ends (conftest.py) or the process exits."""

    def __init__(self, path: str):
        self.profile = tempfile.mkdtemp(prefix="nbtools-tests-chromium-")
        self.proc = subprocess.Popen(
            [path, *PLAYWRIGHTS, *ARGS, "--remote-debugging-port=0",
             f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        self.lines: list = []
        found = threading.Event()

        def read():          # drained for good: a full pipe would stop Chromium
            for line in self.proc.stderr:
                if len(self.lines) < 200:
                    self.lines.append(line)
                m = re.search(r"DevTools listening on (ws://\S+)", line)
                if m:
                    self.endpoint = m.group(1)
                    found.set()
        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + 60
        while not found.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"Chromium at {path} did not start (exit {self.proc.poll()}): "
                            + "".join(self.lines)[-2000:])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.profile, ignore_errors=True)


_SHARED: _Chromium | None = None


def shared_chromium() -> str:
    """This process's Chromium (started now if none is alive): its CDP endpoint."""
    global _SHARED
    if _SHARED is None or not _SHARED.alive():
        _missing(CHROMIUM)
        _SHARED = _Chromium(CHROMIUM)
    return _SHARED.endpoint


def stop_shared() -> None:
    """End this process's Chromium, if one was started."""
    global _SHARED
    chromium, _SHARED = _SHARED, None
    if chromium is not None:
        chromium.stop()


atexit.register(stop_shared)


def launch(pw, chromium: str | None = None):
    """A browser for one test: this process's Chromium over CDP (its contexts are closed
    when the test closes the browser); ``chromium``, another binary, is launched on its own."""
    if chromium is not None and chromium != CHROMIUM:
        _missing(chromium)
        return pw.chromium.launch(executable_path=chromium, args=ARGS)
    return pw.chromium.connect_over_cdp(shared_chromium())


@contextlib.contextmanager
def open_page(pw, path: Path, console_errors: bool = True, width: int = 1300,
              height: int = 1000):
    """A fresh page on ``path`` in a fresh Chromium: yields (page, errors), where errors
    collects the page's uncaught exceptions (and console errors, unless told not to)."""
    browser = launch(pw)
    try:
        page = browser.new_page(viewport={"width": width, "height": height})
        errors: list = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        if console_errors:
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(path.as_uri(), wait_until="load")
        yield page, errors
    finally:
        browser.close()


# Every Bokeh plot on screen, tagged with a stable id; a timeline's rows are its boxes' y.
PLOTS = """() => {
  if (!window.Bokeh || !Bokeh.index) return [];
  window.__nbtools_n = window.__nbtools_n || 0;
  const out = [];
  for (const v of Bokeh.index.all_views()) {
    // a figure its owner hid (a memory lane with no memory recorded) is not to be drawn
    if (!v.frame || !v.model.y_range || !v.el.isConnected || !v.model.visible) continue;
    if (v.__nbtools_id === undefined) v.__nbtools_id = window.__nbtools_n++;
    const src = __nbtools_events(v);
    const yr = v.model.y_range;
    out.push({id: v.__nbtools_id, title: v.model.title ? v.model.title.text : "",
              timeline: !!src, y_range: yr.factors ? null : [yr.start, yr.end],
              ranks: src ? __nbtools_ranks(src) : [], ys: src ? [...src.data.y] : [],
              width: v.el.getBoundingClientRect().width});
  }
  return out;
}"""
# A timeline's boxes: the renderer named "events" (older versions: the source with a "hatch"
# column); each box's rank, from its "rank"
# column or, where a version has none, from its lane label ("r1 cpu").
HELPERS = """() => {
  window.__nbtools_events = v => { const r = v.model.renderers.find(r => r.name === "events")
      || v.model.renderers.find(r => r.data_source && r.data_source.data
                                     && r.data_source.data.hatch !== undefined);
    return r ? r.data_source : null; };
  window.__nbtools_ranks = s => s.data.rank !== undefined ? [...s.data.rank]
      : [...s.data.lane].map(l => parseInt(l.slice(1)));
}"""
_VIEW = "[...Bokeh.index.all_views()].find(v => v.__nbtools_id === id)"
SCROLL = f"(id) => {{ {_VIEW}.el.scrollIntoView({{block: 'center'}}); }}"
# The frame on screen, and per rank the pixel rows its lanes span (canvas -> page).
WHERE = f"""(id) => {{
  const v = {_VIEW}, r = v.el.getBoundingClientRect(), f = v.frame.bbox;
  const src = __nbtools_events(v);
  const bands = {{}};
  if (src) {{
    const rank = __nbtools_ranks(src), y = src.data.y;
    for (let i = 0; i < rank.length; i++) {{
      const b = bands[rank[i]] || (bands[rank[i]] = [Infinity, -Infinity]);
      b[0] = Math.min(b[0], y[i]); b[1] = Math.max(b[1], y[i]);
    }}
    for (const k in bands) {{
      const [a, c] = bands[k].map(u => r.top + v.frame.y_scale.compute(u));
      const half = Math.abs(r.top + v.frame.y_scale.compute(0.4) - r.top - v.frame.y_scale.compute(0));
      bands[k] = [Math.min(a, c) - half, Math.max(a, c) + half];
    }}
  }}
  return {{x: r.left + f.left, y: r.top + f.top, width: f.width, height: f.height, bands}};
}}"""


def ink(img) -> int:
    """Pixels drawn in a colour (boxes, bars), not background, grid, text or step shading:
    those are white or grey (all channels within 60 of each other)."""
    import numpy as np
    rgb = np.asarray(img.convert("RGB"), np.int16)
    return int(((rgb.max(axis=2) - rgb.min(axis=2)) > 60).sum())


def check_plots_drawn(page, name: str, ranks: list, min_plots: int = 1) -> list:
    """Every Bokeh plot in the page is drawn; every timeline shows each of ``ranks`` with
    boxes inside its y-range, checked on BokehJS state and on the screenshot's pixels (each
    rank's lane band holds coloured pixels). Saves one screenshot per plot. Returns the
    plots' descriptions."""
    from PIL import Image
    ARTIFACTS.mkdir(exist_ok=True)
    page.evaluate(HELPERS)
    plots = page.evaluate(PLOTS)
    assert len(plots) >= min_plots, f"{name}: {len(plots)} Bokeh plots in the page: {plots}"
    problems = []
    for p in plots:
        label = f"{name}: plot {p['id']} {p['title']!r}"
        if p["timeline"]:
            got = sorted(set(p["ranks"]))
            if got != sorted(ranks):
                problems.append(f"{label}: boxes for ranks {got}, expected {sorted(ranks)}")
            lo, hi = min(p["ys"], default=0) - 0.4, max(p["ys"], default=0) + 0.4
            y0, y1 = sorted(p["y_range"])
            if not (y0 <= lo and hi <= y1):
                problems.append(f"{label}: y-range {p['y_range']} does not cover its lanes "
                                f"{lo + 0.4:g}..{hi - 0.4:g}")
        view = page.viewport_size or {"height": 10**6}
        for _ in range(4):
            page.evaluate(SCROLL, p["id"])
            page.wait_for_timeout(400)                # scrolled: let BokehJS repaint
            where = page.evaluate(WHERE, p["id"])
            # JupyterLab lays out a cell scrolled to (content-visibility) only once it is
            # on screen, so the first scroll can land short of a tall output: scroll again
            if 0 <= where["y"] and where["y"] + min(where["height"], view["height"]) <= \
                    view["height"] + 1:
                break
        clip = {k: where[k] for k in ("x", "y", "width", "height")}
        if clip["width"] < 50 or clip["height"] < 20:
            problems.append(f"{label}: frame is {clip['width']}x{clip['height']} px")
            continue
        shot = page.screenshot(clip=clip)
        (ARTIFACTS / f"{name}-plot{p['id']}.png").write_bytes(shot)
        img = Image.open(io.BytesIO(shot))
        scale = img.height / clip["height"]
        if not p["timeline"]:
            if ink(img) < 30:
                problems.append(f"{label}: nothing coloured drawn in its frame")
            continue
        for rank, (top, bottom) in where["bands"].items():
            a = max(0, int((top - clip["y"]) * scale))
            b = min(img.height, int((bottom - clip["y"]) * scale) + 1)
            n = ink(img.crop((0, a, img.width, b))) if b > a else 0
            if n < 30:
                problems.append(f"{label}: rank {rank}'s lanes (rows {a}..{b} px) hold {n} "
                                "coloured pixels: no boxes drawn")
    assert not problems, "\n".join(problems)
    return plots


LABEXT = ROOT / "nbtools" / "ui" / "labextension"


# The frame of the Bokeh figure named name, scrolled to the middle of the page (page px).
FIGURE_FRAME = """(name) => {
  const v = [...Bokeh.index.all_views()].find(v => v.model && v.model.name === name && v.frame);
  v.el.scrollIntoView({block: "center"});
  const r = v.canvas.el.getBoundingClientRect(), f = v.frame.bbox;
  return {x: r.left + f.left, y: r.top + f.top, width: f.width, height: f.height};
}"""


def near(img, rgb, tol=40) -> int:
    """How many pixels of ``img`` are within ``tol`` of ``rgb`` on every channel."""
    import numpy as np
    a = np.asarray(img.convert("RGB"), np.int16)
    return int((np.abs(a - np.array(rgb)).max(axis=2) <= tol).sum())


def frame_shot(page, name, label):
    """The frame of the Bokeh figure named ``name``, scrolled into view, as a PIL image
    (also saved as artifacts/timeline-<label>.png); returns (image, clip)."""
    from PIL import Image
    page.wait_for_timeout(400)
    clip = page.evaluate(FIGURE_FRAME, name)
    page.wait_for_timeout(300)
    clip = page.evaluate(FIGURE_FRAME, name)
    png = page.screenshot(clip=clip)
    (ARTIFACTS / f"timeline-{label}.png").write_bytes(png)
    return Image.open(io.BytesIO(png)), clip
