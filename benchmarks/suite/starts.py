"""What a shared JupyterLab or a shared Lab would save the suite: the start and stop of
each, measured with the tests' own JupyterLab helper (tests/support/jupyter.py's Server)
and nbtools.Lab, a few rounds each, medians printed.

    .venv/bin/python benchmarks/suite/starts.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from support.jupyter import Server
    from nbtools import Lab
    rows = {"jupyterlab start": [], "jupyterlab stop": [], "Lab(n=2) start": [],
            "Lab(n=2) close": []}
    for _ in range(a.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            t = time.monotonic()
            server = Server(Path(tmp))
            server.wait()
            t1 = time.monotonic()
            left = server.stop()
            rows["jupyterlab start"].append(t1 - t)
            rows["jupyterlab stop"].append(time.monotonic() - t1)
            assert not left, left
        t = time.monotonic()
        lab = Lab(n=2, history=None)
        t1 = time.monotonic()
        lab.close()
        rows["Lab(n=2) start"].append(t1 - t)
        rows["Lab(n=2) close"].append(time.monotonic() - t1)
    for name, xs in rows.items():
        print(f"{name:18s} median {statistics.median(xs):5.2f} s  "
              f"({', '.join(f'{x:.2f}' for x in xs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
