"""The trace reader on padded input: before and after the linear head scan (issue 16).

    python benchmarks/bench_trace_scan.py [--before 43f110f] [--mb 32] [--reps 3]

Each case is one real trace (tests/fixtures/h200/tp_off_rank0.json.gz, a 2 x H200 rank)
with padding where JSON allows it: before the document, in a metadata string before
"traceEvents", between "traceEvents": and its '[', between two events, after the document;
and a gzip of whitespace alone (the "bomb"). Peak RSS growth: ru_maxrss after the load
minus before it (imports excluded), in MB. The
reader of ``--before`` (a commit; ``git archive`` of its nbtools/ into a temp folder) and
the reader of this checkout load each file in a fresh interpreter; the time is the
load_traces call only (imports excluded), median of --reps, the two interleaved. A run past
--limit seconds is stopped and shown as ">LIMIT".
"""
from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "fixtures" / "h200" / "tp_off_rank0.json.gz"

CHILD = """
import resource, sys, time
from nbtools.results.load import TraceError, load_traces
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
try:
    run = load_traces(sys.argv[1])
    out = f"{len(run.events)} events"
except TraceError as e:
    out = "TraceError: " + str(e).split(": ", 1)[1][:60]
grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024
print(f"{time.perf_counter() - t:.6f}\\t{grew:.0f}\\t{out}")
"""


def cases(folder: Path, mb: int) -> dict:
    doc = json.loads(gzip.open(TRACE).read())
    body = json.dumps(doc).encode()
    pad = b" " * (mb << 20)
    key = body.index(b'"traceEvents"')
    bracket = body.index(b"[", key)
    boundary = body.index(b"}, {", bracket + 2000) + 1
    out = {
        f"{mb} MB leading whitespace": pad + body,
        f"{mb} MB metadata string before traceEvents":
            b'{"padding": "' + b"x" * len(pad) + b'", ' + body[1:],
        f'{mb} MB whitespace between "traceEvents": and [': body[:bracket] + pad + body[bracket:],
        f"{mb} MB whitespace between two events": body[:boundary] + pad + body[boundary:],
        f"{mb} MB whitespace after the document": body + pad,
    }
    paths = {}
    for name, data in out.items():
        p = folder / f"{len(paths)}-rank-0.json.gz"
        p.write_bytes(gzip.compress(data, 1))
        paths[name] = p
    p = folder / "bomb-rank-0.json.gz"
    with gzip.open(p, "wb", 1) as fh:   # 16 x mb MB of whitespace, nothing else
        for _ in range(16):
            fh.write(pad)
    paths[f"gzip of {16 * mb} MB whitespace, no trace"] = p
    return paths


def time_load(src: Path, path: Path, limit: float):
    try:
        # cwd: python -c puts the working directory first on sys.path, ahead of PYTHONPATH
        r = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True,
                           text=True, timeout=limit, env={"PYTHONPATH": str(src), "PATH": ""},
                           cwd=path.parent)
    except subprocess.TimeoutExpired:
        return None, None, f">{limit:.0f} s (stopped)"
    if r.returncode:
        return None, None, "crash: " + r.stderr.strip().splitlines()[-1][:80]
    secs, grew, what = r.stdout.strip().split("\t")
    return float(secs), float(grew), what


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default="43f110f", help="commit with the old reader")
    ap.add_argument("--mb", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--limit", type=float, default=120.0)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        old = tmp / "before"
        old.mkdir()
        tar = subprocess.run(["git", "-C", str(ROOT), "archive", a.before, "nbtools"],
                             capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=tar, check=True)
        readers = {f"before ({a.before})": old, "after (this checkout)": ROOT}
        print(f"| input (gzip, {TRACE.name} with padding) | "
              + " | ".join(f"{k}: median s" for k in readers)
              + " | " + " | ".join(f"{k.split()[0]}: peak RSS growth MB" for k in readers)
              + " | result after |")
        print("|---|" + "---:|" * (2 * len(readers)) + "---|")
        for name, path in cases(tmp, a.mb).items():
            times, mem, what = {k: [] for k in readers}, {k: [] for k in readers}, {}
            for _ in range(a.reps):
                for k, src in readers.items():
                    if what.get(k, "").startswith(">"):
                        continue   # stopped once: once is enough
                    secs, grew, what[k] = time_load(src, path, a.limit)
                    if secs is not None:
                        times[k].append(secs)
                        mem[k].append(grew)
            cells = [f"{statistics.median(v):.2f}" if v else what[k] for k, v in times.items()]
            cells += [f"{statistics.median(v):.0f}" if v else "-" for v in mem.values()]
            print(f"| {name} | " + " | ".join(cells) + f" | {what['after (this checkout)']} |",
                  flush=True)


if __name__ == "__main__":
    main()
