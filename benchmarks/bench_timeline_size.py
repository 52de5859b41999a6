"""What an exported HTML file's bytes are: inline BokehJS, each Bokeh document, and in the
documents the data columns by name (summed over every ColumnDataSource).

    python benchmarks/bench_timeline_size.py FILE.html [FILE.html ...]
    python benchmarks/bench_timeline_size.py --h200     # a report of the committed H200 traces
    python benchmarks/bench_timeline_size.py --reencode OLD.html   # an older export's boxes

``--h200`` writes the report of the 2 x H200 traces that ship with the package
(nbtools/data/h200: tp-mlp-infer, eager and reduce-overhead, 2 ranks each, with their NCCL
collectives' tooltips read from the files) and measures it. For notebook 06 on GPU, export
it with benchmarks/gpu/models.sh and point this script at ``$OUT/06.html``.
``--reencode`` takes a file exported by an older timeline (string columns per box: name,
lane, category, hatch, ...) and serializes its own boxes as this timeline's columns would
be (codes into tables, numbers only): an estimate of what the same boxes weigh now.
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
        for o in _objects(json.loads(b)):
            models[o.get("name")] += 1
            if o.get("name") == "ColumnDataSource":
                for k, v in o.get("attributes", {}).get("data", {}).get("entries", []):
                    cols[k] += len(json.dumps(v, **J))
        code = sum(len(m) for m in re.findall(r'"code":"(?:[^"\\]|\\.)*"', b))
        print(f"  document {i + 1}: {len(b) / 1e6:.2f} MB, data columns "
              f"{sum(cols.values()) / 1e6:.2f} MB, {sum(models.values())} models, "
              f"callback code {code / 1e3:.0f} kB")
        print("    largest columns (kB): " + ", ".join(f"{k} {v / 1e3:.0f}"
                                                       for k, v in cols.most_common(10)))


def _objects(o):
    """Every Bokeh model object in a serialized document, depth first."""
    if isinstance(o, dict):
        if o.get("type") == "object":
            yield o
        for v in o.values():
            yield from _objects(v)
    elif isinstance(o, list):
        for v in o:
            yield from _objects(v)


def _array(v):
    import base64
    import gzip
    import numpy as np
    if isinstance(v, dict) and v.get("type") == "ndarray":
        a = v["array"]
        if isinstance(a, dict) and a.get("type") == "bytes":
            raw = base64.b64decode(a["data"])
            return np.frombuffer(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw,
                                 dtype=v["dtype"])
        return np.asarray(a, object)
    return np.asarray(v, object)


def reencode(path: Path) -> None:
    import numpy as np
    from bokeh.core.serialization import Serializer
    text = path.read_text()
    docs = [b for b in re.findall(r"<script[^>]*>(.*?)</script>", text, re.S)
            if '"version":"3.' in b[:200]]
    old_total = new_total = 0
    for b in docs:
        found = []
        for o in _objects(json.loads(b)):
            if o.get("name") == "ColumnDataSource":
                ent = dict(o.get("attributes", {}).get("data", {}).get("entries", []))
                if "hatch" in ent and "name" in ent:
                    found.append(ent)
        for ent in found:
            old = sum(len(json.dumps(v, **J)) for v in ent.values())
            d = {k: _array(v) for k, v in ent.items()}
            n = len(d["left"])
            names, name_i = np.unique(d["name"].astype(str), return_inverse=True)
            lanes, lane_i = np.unique(d["lane"].astype(str), return_inverse=True)
            _, cat_i = np.unique(d["category"].astype(str), return_inverse=True)
            merged = d["count"].astype(np.int64) > 1
            span_ns = (d["right"] - d["left"]) * 1e6
            cols = dict(left=d["left"].astype(np.float64), right=d["right"].astype(np.float64),
                        y=d["y"].astype(np.int32),
                        rank=np.array([int(x.split()[0][1:]) for x in d["lane"]], np.int32),
                        cat_i=cat_i.astype(np.int8), name_i=name_i.astype(np.int32),
                        lane_i=lane_i.astype(np.int32), step=np.zeros(n, np.int32),
                        count=d["count"].astype(np.int32),
                        # the old file has no busy number: a merged box's span x its opacity
                        busy_ns=np.where(merged, span_ns * d["alpha"], 0).astype(np.float32),
                        alpha=d["alpha"].astype(np.float32),
                        graph=d["hatch"].astype(str) == "/", detail_i=np.zeros(n, np.int32))
            new = (len(json.dumps(Serializer(deferred=False).encode(cols), **J))
                   + len(json.dumps(list(names), **J)) + len(json.dumps(list(lanes), **J)))
            print(f"  a timeline of {n:,} boxes ({len(names)} distinct names): per-box columns "
                  f"{old / 1e6:.2f} MB -> {new / 1e6:.2f} MB")
            old_total, new_total = old_total + old, new_total + new
    print(f"{path}: timelines' boxes {old_total / 1e6:.2f} MB -> {new_total / 1e6:.2f} MB; the "
          f"file {len(text) / 1e6:.2f} MB -> {(len(text) - old_total + new_total) / 1e6:.2f} MB "
          "with its BokehJS and everything else as they are")


def h200_report(folder: Path) -> Path:
    from nbtools.schema import tables
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
    ap.add_argument("--reencode", type=Path, action="append", default=[])
    args = ap.parse_args()
    if not args.files and not args.h200 and not args.reencode:
        ap.error("give HTML files, --h200 or --reencode OLD.html")
    for f in args.reencode:
        reencode(f)
    for f in args.files:
        breakdown(f)
    if args.h200:
        with tempfile.TemporaryDirectory() as tmp:
            breakdown(h200_report(Path(tmp)))


if __name__ == "__main__":
    main()
