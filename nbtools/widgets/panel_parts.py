"""widgets: the panel's small pieces: a control per StepConfig field, buttons, HTML boxes,
and the elapsed-time ticker a blocking run or export shows."""
from __future__ import annotations

import html
import threading
import time
from typing import Callable

import ipywidgets as W

from nbtools.widgets.panel_checks import DEFAULT, NUMBER_OR_DEFAULT


def control(name: str, value, choices: dict) -> W.Widget:
    """The panel's widget for StepConfig field ``name``, set to ``value``: a dropdown of
    ``choices[name]``, a number-or-default box, a checkbox or a number box."""
    # 4 x 290 px wrap in rows rather than clip in a 1280-px notebook; 150 px keeps
    # "reshard_after_forward" whole
    style, layout = {"description_width": "150px"}, W.Layout(width="290px")
    if name in NUMBER_OR_DEFAULT:      # a number, or the word every default is shown as
        w = W.Combobox(value=value, options=[DEFAULT], ensure_option=False, description=name,
                       style=style, layout=layout)
        w.tooltip = f"a whole number, or {DEFAULT}: the scenario's own"
    elif name in choices:
        w = W.Dropdown(options=choices[name], value=value, description=name, style=style,
                       layout=layout)
    elif isinstance(value, bool):      # indent + box + its name ("reshard_after_forward") whole
        w = W.Checkbox(value=value, description=name, indent=True, style=style,
                       layout=W.Layout(width="360px"))
    else:
        w = W.BoundedIntText(value=value, min=0, max=1_000_000, description=name, style=style,
                             layout=layout)
    w.add_class(f"nbtools-{name}")          # stable handles for browser tests
    return w


def button(description: str, action: Callable, cls: str = "", **kw) -> W.Button:
    """A button that calls ``action()`` on click, with CSS class ``cls``. As wide as its
    label and never shrunk by its row, so the label stays whole (a Stop button in a full row
    was cut to "S…"; so is any label longer than ipywidgets' fixed 148 px)."""
    layout = kw.pop("layout", None) or W.Layout()
    if layout.width is None:
        layout.width = "auto"
    if layout.flex is None:
        layout.flex = "0 0 auto"
    b = W.Button(description=description, layout=layout, **kw)
    b.on_click(lambda _: action())
    if cls:
        b.add_class(cls)
    return b


def html_widget(value: str = "", cls: str = "") -> W.HTML:
    """An HTML widget holding ``value``, with CSS class ``cls``."""
    w = W.HTML(value)
    if cls:
        w.add_class(cls)
    return w


class Ticker:
    """Shows the elapsed time in a widget while the with-block runs (from a thread: the
    kernel is busy in the block and cannot update it itself)."""

    def __init__(self, target: W.HTML, text: str):
        self.target, self._text, self.stop = target, text, threading.Event()
        self.detail = ""          # the run's phase and steps per rank (Lab.progress)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.t0 = None

    @property
    def text(self) -> str:
        """The line's words: where the work is (the elapsed time and the run's phase follow)."""
        return self._text

    @text.setter
    def text(self, value: str) -> None:
        """Where the work is (round, side, run): shown at once, not at the next tick, so a
        run shorter than a tick still shows that it ran."""
        self._text = value
        if self.t0 is not None and not self.stop.is_set():
            self._show()

    def _show(self) -> None:
        self.target.value = (f"<b>⏳ {self._text}</b> {time.perf_counter() - self.t0:.1f} s"
                             + (f"<br><small>{html.escape(self.detail)}</small>"
                                if self.detail else ""))

    def _loop(self):
        while True:
            self._show()
            if self.stop.wait(0.5):
                return

    def set_detail(self, text: str) -> None:
        """The run's own progress line, shown after the elapsed seconds."""
        self.detail = text

    def __enter__(self):
        self.t0 = time.perf_counter()
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.elapsed = time.perf_counter() - self.t0
