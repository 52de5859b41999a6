"""The picture a saved notebook shows for a live figure or panel, kept current in the
kernel: ui/picture.py draws it (the one renderer of every static picture), the widget holds
it in a synced trait (``PICTURE``), and the torch-nbtools JupyterLab extension copies that
trait into the output's ``image/png`` as the notebook is saved. So the file shows what the
widget showed last (the panel's last run with its config and summary, a figure as zoomed),
not what it showed when its cell ran.

Redrawing takes a fraction of a second, so it is debounced: ``delay`` after the last change,
on the kernel's event loop (where widget messages are handled: the document is not being
changed meanwhile). Outside a running loop (a script, a test) it is only marked stale and
drawn when asked for."""
from __future__ import annotations

import asyncio
import base64
from typing import Callable

PICTURE = "_nbtools_picture"     # the trait's name, as the extension reads it
DELAY_S = 1.0


def b64png(layout, header=()) -> str:
    """The layout's static picture as base64 PNG, for a widget's saved state."""
    return base64.b64encode(_png(layout, header=header)).decode("ascii")


def _png(layout, header=(), sections=()) -> bytes:
    from nbtools.ui.picture import png      # PIL and numpy, on first use
    return png(layout, header=header, sections=sections)


class Repicture:
    """``poke()`` after each change; ``current()`` is the picture as of now. ``draw``
    returns the base64 PNG, ``store`` puts it into the widget's trait."""

    def __init__(self, draw: Callable[[], str], store: Callable[[str], None],
                 delay: float = DELAY_S):
        self.draw, self.store, self.delay = draw, store, delay
        self.stale, self._handle, self._value = True, None, ""
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    def poke(self) -> None:
        """The figure changed: redraw its picture soon (once, however many pokes)."""
        self.stale = True
        loop = self._loop
        if loop is not None and loop.is_running() and not loop.is_closed():
            loop.call_soon_threadsafe(self._arm)    # pokes come from any thread

    def _arm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop.call_later(self.delay, self._redraw)

    def _redraw(self) -> None:
        self._handle = None
        try:
            self.current()
        except Exception as e:  # noqa: BLE001 - a picture must never break the live view
            import sys
            print(f"torch-nbtools: the saved picture was not redrawn ({type(e).__name__}: {e})",
                  file=sys.__stderr__)

    def current(self) -> str:
        """The picture as it is now, drawn first if stale (what a save takes)."""
        if self.stale or not self._value:
            self.stale = False
            self._value = self.draw()
            self.store(self._value)
        return self._value


def panel_b64png(layout, run, sections=(), empty: str = "no run yet: press Run") -> str:
    """The panel's picture: the run it shows (config, flags, summary) above its timeline
    (``empty`` where it shows none), then ``sections`` ((lines, layout or None): the
    comparison and the exploration it shows), each whole."""
    from nbtools.ui.summary_view import picture_header
    return base64.b64encode(_png(layout, header=picture_header(run) if run is not None
                                 else [empty], sections=sections)).decode("ascii")
