"""Timeline and report size for 1M synthetic events over 8 ranks.

    python benchmarks/bench_timeline.py [--events 1000000] [--ranks 8]

Prints the medians of 3 builds and the browser payload (the exported HTML, and the
serialized Bokeh document inside it). The run comes from tests/support/runs.py's
``synthetic_run``: compute + NCCL streams, two CPU threads, graph replays, compile events.
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

from bokeh.core.json_encoder import serialize_json  # noqa: E402
from bokeh.document import Document  # noqa: E402

from nbtools.report.html import export_html  # noqa: E402
from nbtools.ui.timeline import Timeline, lod  # noqa: E402
from support.runs import synthetic_run  # noqa: E402


def median_s(fn, repeat=3):
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--width", type=int, default=1100)
    args = ap.parse_args()

    t = time.perf_counter()
    # 3 profiled steps of 100 ms: kernels of a few µs, as a busy small-batch step has
    run = synthetic_run(n_ranks=args.ranks, events_per_rank=args.events // args.ranks,
                        step_ns=100_000_000, seed=1)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"synthetic run: {len(run.events):,} events, {args.ranks} ranks "
          f"({time.perf_counter() - t:.1f} s to generate)")

    ev = run.events
    t0, t1 = int(ev.ts_ns.min()), int((ev.ts_ns + ev.dur_ns).max())
    s_lod, boxes = median_s(lambda: lod(ev, args.width, t0, t1))
    print(f"lod over the whole run:         {s_lod:.3f} s -> {len(boxes):,} boxes")

    s_build, tl = median_s(lambda: Timeline(run, width=args.width))
    print(f"Timeline(run) build:            {s_build:.3f} s ({tl.stats['boxes']:,} boxes, "
          f"{tl.stats['merged_events']:,} events merged into {tl.stats['merged_boxes']:,})")

    s_update, _ = median_s(lambda: tl.update(run))
    print(f"Timeline.update(run):           {s_update:.3f} s")

    lo, hi = tl.window_ms
    mid, span = (lo + hi) / 2, (hi - lo) / 50
    s_refine, _ = median_s(lambda: tl.refine(mid - span / 2, mid + span / 2))
    print(f"refine on zoom (1/50 window):   {s_refine:.3f} s ({tl.stats['boxes']:,} boxes)")

    doc = Document()
    doc.add_root(Timeline(run, width=args.width, live=False).layout)
    doc_mb = len(serialize_json(doc.to_json(deferred=False))) / 1e6   # buffers inline
    print(f"serialized Bokeh document:      {doc_mb:.2f} MB")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.html"
        s_export, _ = median_s(lambda: export_html(path, [run], notes="benchmark"))
        size_mb = path.stat().st_size / 1e6
        tiny = synthetic_run(events_per_rank=100)
        base_mb = export_html(Path(tmp) / "tiny.html", [tiny]).stat().st_size / 1e6
    print(f"export_html (1 run):            {s_export:.3f} s, {size_mb:.2f} MB file")
    print(f"  for scale, a 2-rank run of {len(tiny.events)} events: {base_mb:.2f} MB "
          "(mostly the inline BokehJS)")


if __name__ == "__main__":
    main()
