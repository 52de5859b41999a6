"""Which kinds of process the suite's CPU goes to: lab engines, notebook kernels, JupyterLab,
Chromium, pip, the pytest workers. /proc is read every INTERVAL seconds; each process's last
user+sys CPU is kept by pid and sorted into a kind by its command line. A process that
lives less than INTERVAL, or CPU spent after the last sample, is missed, so the sums are a
floor. On SIGTERM/SIGINT (or every 60 s) OUT gets one JSON object: per kind the CPU seconds
and the number of processes, the same per program (python: per module), and the 40
costliest processes.

    python benchmarks/suite/cpuwatch.py OUT.json [INTERVAL]     # runs until killed
"""
import json
import os
import signal
import sys
import time

KINDS = [   # first match on the command line wins
    ("engine", ("nbtools.engine", "ipengine", "ipyparallel.engine")),
    ("controller", ("ipcontroller", "ipyparallel.controller", "ipyparallel.cluster")),
    ("kernel", ("ipykernel",)),
    ("jupyter", ("jupyter", "jupyterlab")),
    ("chromium", ("chromium", "chrome")),
    ("pip", ("pip", "setup.py", "wheel")),
    ("pytest", ("pytest", "xdist", "dev.py")),
    ("python-other", ("python",)),
]
TICK = os.sysconf("SC_CLK_TCK")


def head_of(cmd: str) -> str:
    """The program and, for python, its module or script: ``python -m nbtools.engine.boot``."""
    argv = cmd.split()
    if not argv:
        return "?"
    prog = os.path.basename(argv[0])
    if prog.startswith("python") and len(argv) > 1:
        rest = argv[2] if argv[1] in ("-m", "-u") and len(argv) > 2 else argv[1]
        if argv[1] == "-u" and len(argv) > 3 and argv[2] == "-c":
            rest = "-c"
        return f"{prog} {argv[1] if argv[1] == '-m' else ''} {os.path.basename(rest)}".replace("  ", " ")
    return prog


def kind_of(cmd: str) -> str:
    for kind, needles in KINDS:
        if any(n in cmd for n in needles):
            return kind
    return "other"


def main() -> None:
    out = sys.argv[1]
    interval = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
    me = os.getpid()
    seen: dict[int, dict] = {}      # pid -> {cpu, kind, cmd, start}

    def dump(*_):
        kinds: dict[str, dict] = {}
        for p in seen.values():
            k = kinds.setdefault(p["kind"], dict(cpu=0.0, n=0))
            k["cpu"] += p["cpu"]
            k["n"] += 1
        heads: dict[str, dict] = {}
        for p in seen.values():
            h = heads.setdefault(head_of(p["cmd"]), dict(cpu=0.0, n=0))
            h["cpu"] += p["cpu"]
            h["n"] += 1
        heads = dict(sorted(heads.items(), key=lambda kv: -kv[1]["cpu"])[:40])
        top = sorted(seen.values(), key=lambda p: -p["cpu"])[:40]
        with open(out, "w") as f:
            json.dump(dict(kinds=kinds, total=sum(k["cpu"] for k in kinds.values()), heads=heads,
                           top=top), f,
                      indent=1)
        if _:
            sys.exit(0)

    signal.signal(signal.SIGTERM, dump)
    signal.signal(signal.SIGINT, dump)
    last = time.monotonic()
    first = True
    while True:
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            pid = int(name)
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                cpu = (int(fields[11]) + int(fields[12])) / TICK
                start = int(fields[19])
                p = seen.get(pid)
                if p is None or p["start"] != start:     # a new process (or a reused pid)
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:300]
                    if p is not None:                    # keep the old one under another key
                        seen[-len(seen) - 1] = p
                    p = seen[pid] = dict(cpu=0.0, kind=kind_of(cmd), cmd=cmd, start=start,
                                         base=cpu if first else 0.0)
                p["cpu"] = cpu - p["base"]     # what ran before the watch began is not counted
            except (OSError, IndexError, ValueError):
                continue
        first = False
        if time.monotonic() - last > 60:
            dump()
            last = time.monotonic()
        time.sleep(interval)


if __name__ == "__main__":
    main()
