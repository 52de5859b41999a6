"""pytest plugin: each test's wall time, the CPU of this process and of its reaped children,
and the machine's busy CPU seconds over the same span (/proc/stat: every process, the labs'
engines, JupyterLab and Chromium included), one JSON line per test in $NBPROF_OUT.

busy / wall says how many cores a test kept busy: near 1 a test waits on one process at a
time, near 2 (on 2 cores) it is CPU-bound. benchmarks/suite/summary.py sums it per module."""
import json, os, resource, time
import pytest

OUT = os.environ.get("NBPROF_OUT", "suite_profile.jsonl")

def _stat():
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    v = list(map(int, parts))
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)

def _cpu():
    s = resource.getrusage(resource.RUSAGE_SELF); c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    t0 = time.monotonic(); s0, c0 = _cpu(); b0, a0 = _stat()
    yield
    t1 = time.monotonic(); s1, c1 = _cpu(); b1, a1 = _stat()
    hz = os.sysconf("SC_CLK_TCK")
    with open(OUT, "a") as f:
        f.write(json.dumps(dict(id=item.nodeid, wall=t1 - t0, self=s1 - s0, children=c1 - c0,
                                busy=(b1 - b0) / hz, pid=os.getpid())) + "\n")
