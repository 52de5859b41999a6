"""Lines one coverage run covered and another did not, per file (coverage.py's JSON
reports, `coverage json`, as benchmarks/suite/run.sh --coverage writes them).

    python benchmarks/suite/coverage_diff.py BEFORE/coverage.json AFTER/coverage.json
"""
from __future__ import annotations

import json
import sys


def covered(path: str) -> tuple[dict, dict]:
    with open(path) as f:
        data = json.load(f)
    return ({name: set(info["executed_lines"]) for name, info in data["files"].items()},
            data["totals"])


def main() -> None:
    before, tb = covered(sys.argv[1])
    after, ta = covered(sys.argv[2])
    for label, t in (("before", tb), ("after", ta)):
        print(f"{label}: {t['covered_lines']} of {t['num_statements']} lines "
              f"({t['percent_covered']:.2f} %)")
    lost = {f: sorted(before[f] - after.get(f, set())) for f in before}
    gained = {f: sorted(after[f] - before.get(f, set())) for f in after}
    for label, diff in (("covered before, not after", lost), ("covered after, not before", gained)):
        rows = {f: ls for f, ls in diff.items() if ls}
        print(f"\n{label}: {sum(map(len, rows.values()))} lines in {len(rows)} files")
        for f, ls in sorted(rows.items()):
            print(f"  {f}: {ls}")


if __name__ == "__main__":
    main()
