"""The suite's wall time per test group, from a pytest junit xml (`--junitxml=FILE`): seconds
(setup, call and teardown of each test, pytest's junit default), tests, failures, skips and
the slowest test of each group, the groups slowest first; with --compare, the same for an
earlier run beside it, and the change, so a group that got slower is seen.

A group is the folder under tests/ (tests/engine/, tests/ui/browser/...) and, for a file directly in tests/,
the file. The seconds are the tests' own: on N workers the run's wall is about their sum
over N (the junit's session time is printed with them).

    python benchmarks/suite/wall.py RUN.xml [--compare EARLIER.xml] [--top 40] [--md]

docs/benchmarks.md, "The suite's wall time per group", has the command and the numbers.
"""
from __future__ import annotations

import argparse
import collections
import xml.etree.ElementTree as ET


def group_of(classname: str) -> str:
    """'tests.engine.test_x.TestY' -> 'engine/', 'tests.ui.browser.test_x' -> 'ui/browser/',
    'tests.test_cli' -> 'test_cli.py'."""
    parts = [p for p in classname.split(".") if p]
    while parts and parts[-1][:1].isupper():      # test classes, not modules
        parts.pop()
    if parts and parts[0] == "tests":
        parts = parts[1:]
    if len(parts) > 1:
        return "/".join(parts[:-1]) + "/"
    return (parts[0] + ".py") if parts else "?"


def load(path: str) -> tuple[dict, float]:
    """{group: {wall, n, failed, skipped, slowest: (seconds, test)}}, the session's time."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    out = collections.defaultdict(lambda: dict(wall=0.0, n=0, failed=0, skipped=0,
                                               slowest=(0.0, "")))
    for case in root.iter("testcase"):
        g = out[group_of(case.get("classname", ""))]
        t = float(case.get("time") or 0.0)
        g["wall"] += t
        g["n"] += 1
        g["failed"] += any(c.tag in ("failure", "error") for c in case)
        g["skipped"] += any(c.tag == "skipped" for c in case)
        if t > g["slowest"][0]:
            g["slowest"] = (t, case.get("name", ""))
    return dict(out), sum(float(s.get("time") or 0.0) for s in suites)


def table(run: dict, earlier: dict | None, top: int, md: bool) -> list[str]:
    cols = ["group", "tests", "seconds"] + (["before", "change"] if earlier is not None else []) \
        + ["failed", "skipped", "slowest test (s)"]
    rows = []
    for name, g in sorted(run.items(), key=lambda kv: -kv[1]["wall"])[:top]:
        row = [name, str(g["n"]), f"{g['wall']:.1f}"]
        if earlier is not None:
            was = earlier.get(name)
            row += (["-", "new"] if was is None else
                    [f"{was['wall']:.1f}", f"{g['wall'] - was['wall']:+.1f}"])
        row += [str(g["failed"]), str(g["skipped"]),
                f"{g['slowest'][1]} ({g['slowest'][0]:.1f})"]
        rows.append(row)
    if md:
        return ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)] + \
               ["| " + " | ".join(r) + " |" for r in rows]
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c)
              for i, c in enumerate(cols)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [cols] + rows]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("junit")
    ap.add_argument("--compare", help="an earlier run's junit xml")
    ap.add_argument("--top", type=int, default=1000, help="this many groups, slowest first")
    ap.add_argument("--md", action="store_true", help="a Markdown table")
    a = ap.parse_args(argv)
    run, session = load(a.junit)
    earlier = load(a.compare)[0] if a.compare else None
    print("\n".join(table(run, earlier, a.top, a.md)))
    total = sum(g["wall"] for g in run.values())
    print(f"\n{sum(g['n'] for g in run.values())} tests, {total:.1f} s of test time, "
          f"session {session:.1f} s")


if __name__ == "__main__":
    main()
