"""What an exported HTML file's bytes are: inline BokehJS, each Bokeh document, and in the
documents the data columns by name (summed over every ColumnDataSource).

    python benchmarks/bench_timeline_size.py FILE.html [FILE.html ...]
    python benchmarks/bench_timeline_size.py --h200     # a report of the committed H200 traces

``--h200`` writes the report of the 2 x H200 traces that ship with the package
(nbtools/data/h200: tp-mlp-infer, eager and reduce-overhead, 2 ranks each, with their NCCL
collectives' tooltips read from the files) and measures it. For notebook 06 on GPU, export
it with benchmarks/gpu/models.sh and point this script at ``$OUT/06.html``.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

J = dict(separators=(",", ":"))


def breakdown(path: Path) -> None:
    text = path.read_text()
    blocks = re.findall(r"<script[^>]*>(.*?)</script>", text, re.S)
    js = sum(len(b) for b in blocks if "BEGIN bokeh" in b[:100])
    docs = [b for b in blocks if '"version":"3.' in b[:200]]
    print(f"{path}: {len(text) / 1e6:.2f} MB = inline BokehJS {js / 1e6:.2f} MB + "
          f"{len(docs)} Bokeh document(s) {sum(map(len, docs)) / 1e6:.2f} MB + the rest "
          f"{(len(text) - js - sum(map(len, docs))) / 1e6:.2f} MB (HTML, text, images)")
    for i, b in enumerate(docs):
        cols, models = collections.Counter(), collections.Counter()

        def walk(o):
            if isinstance(o, dict):
                if o.get("type") == "object":
                    models[o.get("name")] += 1
                    if o.get("name") == "ColumnDataSource":
                        for k, v in o.get("attributes", {}).get("data", {}).get("entries", []):
                            cols[k] += len(json.dumps(v, **J))
                for v in o.values():
                    walk(v)
            elif isinstance(o, list):
                for v in o:
                    walk(v)
        walk(json.loads(b))
        code = sum(len(m) for m in re.findall(r'"code":"(?:[^"\\]|\\.)*"', b))
        print(f"  document {i + 1}: {len(b) / 1e6:.2f} MB, data columns "
              f"{sum(cols.values()) / 1e6:.2f} MB, {sum(models.values())} models, "
              f"callback code {code / 1e3:.0f} kB")
        print("    largest columns (kB): " + ", ".join(f"{k} {v / 1e3:.0f}"
                                                       for k, v in cols.most_common(10)))


def h200_report(folder: Path) -> Path:
    from nbtools.analysis import tables
    from nbtools.claims.recorded import recorded_h200
    from nbtools.common.package_data import h200_traces_dir
    from nbtools.report.html import export_html
    from nbtools.trace.details import DETAIL_COLUMNS, trace_file_details
    runs = recorded_h200()
    for mode, run in runs.items():
        files = sorted(h200_traces_dir().glob(f"tp_{mode}_rank*.json.gz"))
        run.event_details = tables.concat(
            [tables.from_wire(DETAIL_COLUMNS, trace_file_details(f, int(f.name[-9])))
             for f in files], DETAIL_COLUMNS)
        print(f"H200 {mode}: {len(run.events):,} events, {len(run.event_details):,} details")
    return export_html(folder / "h200.html", list(runs.values()),
                       comparisons=[(runs["off"], runs["reduce-overhead"])])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--h200", action="store_true")
    args = ap.parse_args()
    if not args.files and not args.h200:
        ap.error("give HTML files, or --h200")
    for f in args.files:
        breakdown(f)
    if args.h200:
        with tempfile.TemporaryDirectory() as tmp:
            breakdown(h200_report(Path(tmp)))


if __name__ == "__main__":
    main()
