"""The checkout's folders as the tests see them, from this file's place (tests/support/),
so a test's own folder does not matter."""
from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
NOTEBOOKS = ROOT / "notebooks"
# the recorded 2 x H200 traces the package ships (nbtools/data/h200)
H200 = ROOT / "nbtools" / "data" / "h200"
# screenshots and pages a test leaves for a person to look at
ARTIFACTS = ROOT / "artifacts"
