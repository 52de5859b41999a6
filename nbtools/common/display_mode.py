"""Whether figures and progress show live (widgets in a kernel) or static (inline HTML, what
an offline export needs: widget JS would otherwise come from a CDN). ``NBTOOLS_STATIC=1``
selects static; the notebook exporter sets it."""
from __future__ import annotations

import os


def static_mode() -> bool:
    """True in an export (NBTOOLS_STATIC set, not 0): no kernel will drive widgets, so
    views render static HTML instead."""
    return os.environ.get("NBTOOLS_STATIC", "") not in ("", "0")
