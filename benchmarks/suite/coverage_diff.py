"""Lines one coverage run covered and another did not, per file (coverage.py's JSON
reports, `coverage json`, as benchmarks/suite/run.sh --coverage writes them).

    python benchmarks/suite/coverage_diff.py BEFORE/coverage.json AFTER/coverage.json \
        [--revs BEFORE_COMMIT AFTER_COMMIT]

Without --revs, line numbers are compared as they are: right only when the two runs measured
the same source. With --revs (the commits each run measured, read from this repository's
git) a line of the before run is followed to where it stands in the after source (difflib
on the two versions of the file), so a file edited between the runs compares the lines
both versions have; lines only one version has are counted apart, not called lost.
"""
from __future__ import annotations

import argparse
import difflib
import json
import subprocess


def covered(path: str) -> tuple[dict, dict]:
    with open(path) as f:
        data = json.load(f)
    return ({name: set(info["executed_lines"]) for name, info in data["files"].items()},
            data["totals"])


def source(rev: str, path: str) -> list[str] | None:
    r = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True)
    return r.stdout.splitlines() if r.returncode == 0 else None


def line_map(old: list[str], new: list[str]) -> dict[int, int]:
    """1-based line numbers of ``old`` -> the same line in ``new``, for unchanged lines."""
    out = {}
    sm = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for a, b, n in sm.get_matching_blocks():
        for k in range(n):
            out[a + k + 1] = b + k + 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--revs", nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--lines", action="store_true", help="list every line, not counts per file")
    a = ap.parse_args()
    before, tb = covered(a.before)
    after, ta = covered(a.after)
    for label, t in (("before", tb), ("after", ta)):
        print(f"{label}: {t['covered_lines']} of {t['num_statements']} lines "
              f"({t['percent_covered']:.2f} %)")
    lost, gained, moved_out = {}, {}, {}
    for f in sorted(set(before) | set(after)):
        b, n = before.get(f, set()), after.get(f, set())
        if a.revs:
            old, new = source(a.revs[0], f), source(a.revs[1], f)
            if new is None:          # the file is gone: all it covered went with it
                moved_out[f] = sorted(b)
                continue
            if old is None:          # a new file: all it covers is new
                gained[f] = sorted(n)
                continue
            m = line_map(old, new)
            lost[f] = sorted(x for x in b if x in m and m[x] not in n)
            moved_out[f] = sorted(x for x in b if x not in m)     # the line changed or went
            inv = {v: k for k, v in m.items()}
            gained[f] = sorted(y for y in n if y not in inv or inv[y] not in b)
        else:
            lost[f] = sorted(b - n)
            gained[f] = sorted(n - b)
    sections = [("covered before, not after (a line both versions have)", lost),
                ("covered after, not before", gained)]
    if a.revs:
        sections.append(("covered before on a line the after source no longer has "
                         "(edited, moved or its file gone)", moved_out))
    for label, diff in sections:
        rows = {f: ls for f, ls in diff.items() if ls}
        print(f"\n{label}: {sum(map(len, rows.values()))} lines in {len(rows)} files")
        for f, ls in sorted(rows.items()):
            print(f"  {f}: {ls if a.lines else len(ls)}")


if __name__ == "__main__":
    main()
