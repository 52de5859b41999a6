"""The command line in this process (main(), no child's imports): what it returned and printed."""
from __future__ import annotations

from nbtools.cli.main import main


def cli(capsys, *args):
    """`nbtools ARGS` in this process: (exit status, stdout, stderr)."""
    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_line(err: str) -> str:
    """The one line an error printed (no traceback); fails the test otherwise."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]
