"""Per-module sums of a suite_profile.py record: wall seconds, the machine's busy CPU seconds
over them (busy/wall: cores kept busy), tests; the slowest tests after.

    python benchmarks/suite/summary.py OUTDIR/profile.jsonl [--top 30] [--compare OTHER.jsonl]
"""
from __future__ import annotations

import argparse
import collections
import json


def load(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def by_module(rows: list[dict]) -> dict:
    out = collections.defaultdict(lambda: dict(wall=0.0, busy=0.0, n=0))
    for r in rows:
        m = out[r["id"].split("::")[0].removeprefix("tests/")]
        m["wall"] += r["wall"]
        m["busy"] += r["busy"]
        m["n"] += 1
    return dict(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("profile")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--compare", help="another profile: its module walls side by side")
    a = ap.parse_args()
    rows = load(a.profile)
    mods = by_module(rows)
    other = by_module(load(a.compare)) if a.compare else {}
    wall = sum(m["wall"] for m in mods.values())
    busy = sum(m["busy"] for m in mods.values())
    print(f"{len(rows)} tests, {wall:.0f} s of test time, {busy:.0f} busy CPU s "
          f"({busy / wall:.2f} cores busy on average)\n")
    print(f"{'module':42} {'tests':>5} {'wall s':>8} {'busy s':>8} {'cores':>5}"
          + (f" {'other':>8}" if other else ""))
    for name, m in sorted(mods.items(), key=lambda kv: -kv[1]["wall"]):
        line = f"{name:42} {m['n']:5d} {m['wall']:8.1f} {m['busy']:8.1f} {m['busy'] / max(m['wall'], 1e-9):5.2f}"
        if other:
            line += f" {other.get(name, {}).get('wall', 0.0):8.1f}"
        print(line)
    print(f"\nslowest {a.top} tests:")
    for r in sorted(rows, key=lambda r: -r["wall"])[:a.top]:
        print(f"{r['wall']:8.1f} {r['busy']:8.1f}  {r['id']}")


if __name__ == "__main__":
    main()
