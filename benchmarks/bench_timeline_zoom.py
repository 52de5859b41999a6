"""Wheel zoom on the 1M-event timeline in headless Chromium: frame times while zooming.

    python benchmarks/bench_timeline_zoom.py [--events 1000000] [--ranks 8] [--ticks 24]

Builds the timeline of tests/support/runs.py's synthetic run (static HTML, INLINE BokehJS,
canvas backend), switches the wheel-zoom tool on, sends ``--ticks`` wheel events over the
plot (half in, half out) and records every animation frame's interval with
requestAnimationFrame. Prints the median and 95th percentile frame interval, the longest,
the wall time of the ticks, the page's size and how long it took to first paint, and the
machine and its load average (the box is shared: read the numbers with the load): over
the ticks and ``--settle-ms`` after them (the full detail's repaint included), over the
ticks alone, and the slow frames after the last tick (when the detail comes back).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from bokeh.embed import file_html  # noqa: E402
from bokeh.resources import INLINE  # noqa: E402

from nbtools.ui.timeline import Timeline  # noqa: E402
from support.runs import synthetic_run  # noqa: E402

FRAMES = """() => { window.__frames = []; window.__wheels = []; let last = performance.now();
  addEventListener("wheel", () => window.__wheels.push(performance.now()), {capture: true});
  const tick = t => { window.__frames.push([t, t - last]); last = t; requestAnimationFrame(tick); };
  requestAnimationFrame(tick); }"""
WHEEL_ON = """() => { const v = [...Bokeh.index.all_views()].find(v => v.model.name === 'timeline'
    && v.frame); const t = v.model.toolbar.tools.find(t => t.type === 'WheelZoomTool'
    || (t.constructor && t.constructor.name === 'WheelZoomTool'));
  v.model.toolbar.active_scroll = t; v.el.scrollIntoView({block: 'center'});
  const r = v.canvas.el.getBoundingClientRect(), f = v.frame.bbox;
  return {x: r.left + f.left + f.width / 2, y: r.top + f.top + f.height / 2}; }"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--ticks", type=int, default=24)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    # long enough for the detail's repaint after the motion (BokehJS: 500 ms after the last
    # tick; this branch: 300 ms after that) to fall inside the measurement
    ap.add_argument("--settle-ms", type=int, default=1500)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    run = synthetic_run(n_ranks=args.ranks, events_per_rank=args.events // args.ranks,
                        step_ns=100_000_000, seed=1)
    tl = Timeline(run, width=1100, live=False)
    with tempfile.TemporaryDirectory() as tmp:
        page_path = Path(tmp) / "timeline.html"
        page_path.write_text(file_html(tl.layout, INLINE, "zoom"))
        size_mb = page_path.stat().st_size / 1e6
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=args.chromium,
                                         args=["--headless", "--no-sandbox"])
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            page.on("pageerror", lambda e: print("page error:", e))
            page.on("console", lambda m: print("console:", m.text) if m.type == "error" else None)
            t = time.perf_counter()
            page.goto(page_path.as_uri(), wait_until="load")
            page.wait_for_function("() => window.Bokeh && [...Bokeh.index.all_views()]"
                                   ".some(v => v.model.name === 'timeline' && v.frame)",
                                   timeout=120_000)
            load_s = time.perf_counter() - t
            page.wait_for_timeout(1000)
            at = page.evaluate(WHEEL_ON)
            page.mouse.move(at["x"], at["y"])
            page.evaluate(FRAMES)
            page.wait_for_timeout(300)
            page.evaluate("() => { window.__frames = []; window.__wheels = []; }")
            t = time.perf_counter()
            for i in range(args.ticks):
                page.mouse.wheel(0, -120 if i < args.ticks // 2 else 120)
                page.wait_for_timeout(16)
            page.wait_for_timeout(args.settle_ms)
            wall = time.perf_counter() - t
            frames = page.evaluate("() => window.__frames")
            wheels = page.evaluate("() => window.__wheels")
            browser.close()
    print(f"{len(run.events):,} events, {tl.stats['boxes']:,} boxes drawn, "
          f"{len(tl.flows_source.data['x0'])} flows; file {size_mb:.2f} MB; "
          f"page ready in {load_s:.1f} s")
    t0, t1 = wheels[0], wheels[-1]
    frames = [(t, f) for t, f in frames if f > 0 and t >= t0]
    print(f"{args.ticks} wheel ticks, then {args.settle_ms} ms: {_stats(frames, wall)}")
    turning = [(t, f) for t, f in frames if t <= t1 + 100]
    print(f"  while the wheel turns (first tick to last + 100 ms): {_stats(turning)}")
    after = [(t - t1, f) for t, f in frames if t > t1 + 100]
    slow = [(t, f) for t, f in after if f > 34]
    print(f"  after the last tick: {len(slow)} frames over 34 ms "
          + ", ".join(f"{f:.0f} ms (ends at +{t:.0f} ms)" for t, f in slow[:6]))


def _stats(frames: list, wall: float | None = None) -> str:
    busy = [f for _, f in frames]
    if not busy:
        return "no frames"
    q = statistics.quantiles(busy, n=20) if len(busy) >= 20 else sorted(busy)
    slow = sorted((f for f in busy if f > 34), reverse=True)
    return (f"{len(busy)} frames" + (f" in {wall:.2f} s" if wall else "")
            + f"; frame interval median {statistics.median(busy):.1f} ms, p95 {q[-1]:.1f} ms, "
            f"max {max(busy):.1f} ms; over 34 ms (two frames): {len(slow)}")


if __name__ == "__main__":
    main()
