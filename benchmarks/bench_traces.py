"""Loading Kineto traces: nbtools.load_traces vs HolisticTraceAnalysis, same files, one run.

    python benchmarks/bench_traces.py [--folder DIR] [--reps 5] [--no-memory]

Time: median wall time of --reps loads per file and tool, the two tools interleaved so
background load hits both alike. Events = every entry of traceEvents (the same numerator
for both tools). HTA is timed through its user-facing loader, ``Trace(...).load_traces``
(parse, correlate, iterations, align), single process. Memory: peak RSS added while loading,
each file+tool in a fresh subprocess (RSS sampled every ms, and ru_maxrss), against the
size of the uncompressed JSON (after one warm-up load of the smallest file in the same
process, so one-time imports are not counted for either tool).
"""
from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import platform
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT = ROOT / "tests" / "fixtures" / "hta"


def load_nbtools(path: Path):
    from nbtools.results.load import TraceError, load_traces
    try:
        return load_traces(path)
    except TraceError as e:
        if "cannot tell its rank" not in str(e):
            raise
        return load_traces(path, rank=0)   # files without distributedInfo: say it explicitly


def load_hta(path: Path):
    from hta.common.trace import Trace
    from hta.configs.config import logger
    logger.setLevel(logging.ERROR)
    t = Trace(trace_files={0: str(path)}, trace_dir=str(path.parent))
    t.load_traces(use_multiprocessing=False, use_memory_profiling=False)
    return t


TOOLS = {"nbtools": load_nbtools, "hta": load_hta}


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(tool: str, path: Path) -> None:
    """Runs in a fresh interpreter. One load of the smallest trace first, so imports and
    other one-time costs of either tool are not counted; then measure the load only."""
    import gc
    smallest = min((p for p in path.parent.iterdir() if p.name.endswith((".json", ".json.gz"))),
                   key=lambda p: p.stat().st_size)
    try:
        TOOLS[tool](smallest)
    except Exception:
        pass
    gc.collect()
    base, max_before = _rss(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    peak, done = [base], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.001)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    error = ""
    try:
        result = TOOLS[tool](path)
    except Exception as e:   # report, don't hide: a tool that cannot load a file says so
        error, result = f"{type(e).__name__}: {e}"[:120], None
    done.set()
    th.join()
    max_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    top = max(peak[0], _rss(), max_after if max_after > max_before else 0)
    print(json.dumps({"added": top - base, "error": error}))
    del result


def measure_memory(tool: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", tool, str(path)],
                         capture_output=True, text=True, check=False)
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"added": float("nan"), "error": (out.stderr.strip().splitlines() or ["?"])[-1]}


def file_facts(path: Path) -> tuple[int, int]:
    import orjson
    raw = (gzip.open if path.name.endswith(".gz") else open)(path, "rb").read()
    return len(orjson.loads(raw)["traceEvents"]), len(raw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", type=Path, default=DEFAULT)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child[0], Path(a.child[1]))
    if not a.folder.is_dir():
        sys.exit(f"{a.folder}: no such folder (the HTA traces live in tests/fixtures/hta)")
    import hta
    import orjson
    import pandas
    logging.getLogger("hta").setLevel(logging.ERROR)
    files = sorted(p for p in a.folder.iterdir() if p.name.endswith((".json", ".json.gz")))
    print(f"python {platform.python_version()}, pandas {pandas.__version__}, orjson "
          f"{orjson.__version__}, HolisticTraceAnalysis {_hta_version(hta)}, {os.cpu_count()} "
          f"cpus, {a.reps} reps, median wall time\n")
    head = ("| file | events | JSON MiB | nbtools s | HTA s | nbtools ev/s | HTA ev/s | speedup "
            "| speedup (CPU time) | nbtools +MiB | HTA +MiB | nbtools +MiB / JSON MiB |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    tot = {"events": 0, "nb": 0.0, "hta": 0.0, "nb_cpu": 0.0, "hta_cpu": 0.0}
    for path in files:
        events, size = file_facts(path)
        times, cpu = {"nbtools": [], "hta": []}, {"nbtools": [], "hta": []}
        errors = {}
        for tool in TOOLS:   # warm-up (imports, caches) outside the timing
            try:
                TOOLS[tool](path)
            except Exception as e:
                errors[tool] = f"{type(e).__name__}"
        for _ in range(a.reps):
            for tool in TOOLS:
                if tool in errors:
                    continue
                t, c = time.perf_counter(), time.process_time()
                TOOLS[tool](path)
                times[tool].append(time.perf_counter() - t)
                cpu[tool].append(time.process_time() - c)
        med = {k: statistics.median(v) if v else float("nan") for k, v in times.items()}
        cpu_med = {k: statistics.median(v) if v else float("nan") for k, v in cpu.items()}
        mem = {k: (measure_memory(k, path) if not a.no_memory else {"added": float("nan")})
               for k in TOOLS}
        mb = {k: mem[k]["added"] / 2**20 for k in TOOLS}
        hta_s = f"{med['hta']:.3f}" if "hta" not in errors else f"fails ({errors['hta']})"
        print(f"| {path.name[:44]} | {events} | {size / 2**20:.1f} | {med['nbtools']:.3f} | "
              f"{hta_s} | {events / med['nbtools']:,.0f} | {events / med['hta']:,.0f} | "
              f"{med['hta'] / med['nbtools']:.1f}x | {cpu_med['hta'] / cpu_med['nbtools']:.1f}x | "
              f"{mb['nbtools']:.1f} | {mb['hta']:.1f} | "
              f"{mb['nbtools'] / (size / 2**20):.2f} |", flush=True)
        if "hta" not in errors:
            tot["events"] += events
            tot["nb"] += med["nbtools"]
            tot["hta"] += med["hta"]
            tot["nb_cpu"] += cpu_med["nbtools"]
            tot["hta_cpu"] += cpu_med["hta"]
    print(f"| **all files** | {tot['events']} | | {tot['nb']:.3f} | {tot['hta']:.3f} | "
          f"{tot['events'] / tot['nb']:,.0f} | {tot['events'] / tot['hta']:,.0f} | "
          f"{tot['hta'] / tot['nb']:.1f}x | {tot['hta_cpu'] / tot['nb_cpu']:.1f}x | | | |")


def _hta_version(hta) -> str:
    try:
        from importlib.metadata import version
        return version("HolisticTraceAnalysis")
    except Exception:
        return getattr(hta, "__version__", "?")


if __name__ == "__main__":
    main()
