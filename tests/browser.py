"""Headless Debian Chromium for the browser tests (Playwright's own browser download cannot
work offline). A missing Chromium fails the test; it never skips."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("NBTOOLS_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"


def launch(pw, chromium: str | None = None):
    path = chromium or CHROMIUM
    if not Path(path).exists():
        pytest.fail(f"Chromium not found at {path}: install it (apt-get install chromium) "
                    "or point NBTOOLS_CHROMIUM at a Chromium binary. This test does not skip.")
    return pw.chromium.launch(executable_path=path, args=ARGS)
