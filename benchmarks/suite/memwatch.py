"""Sample the machine's memory while the suite runs: one JSON line every INTERVAL seconds with
MemAvailable, Shmem (/dev/shm counts as memory) and the biggest processes by RSS, so that a
std::bad_alloc or an OOM kill in a run can be traced to what held the memory at that moment.

    python benchmarks/suite/memwatch.py OUT.jsonl [INTERVAL]     # runs until killed
"""
import json
import os
import sys
import time


def meminfo() -> dict:
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            out[key] = int(value.split()[0]) // 1024     # MiB
    return out


def processes(top: int = 8) -> tuple:
    """The ``top`` biggest processes (RSS MiB, pid, command), the RSS sum, the count."""
    rows = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/statm") as f:
                rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:160]
        except OSError:
            continue
        rows.append((rss, int(pid), cmd))
    rows.sort(reverse=True)
    return rows[:top], sum(r[0] for r in rows), len(rows)


def main() -> None:
    out, interval = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    with open(out, "a") as f:
        while True:
            m = meminfo()
            top, total, n = processes()
            f.write(json.dumps({"t": time.time(), "avail": m["MemAvailable"],
                                "shmem": m["Shmem"], "rss_sum": total, "procs": n,
                                "top": top}) + "\n")
            f.flush()
            time.sleep(interval)


if __name__ == "__main__":
    main()
