"""Home directories out of what leaves the machine (trace event names, exported reports):
one rule, so a path that a trace drops is never one a report keeps, or the reverse."""
from __future__ import annotations

import re

# What may follow a home folder's name: path and text punctuation. A name itself never holds
# these (':' and ',' separate fields in passwd and in "file:line, in f"), so "/home/bob:3"
# keeps its ":3".
_END = r"""/\\\s"'`<>:,;()\[\]{}=|"""
HOME = re.compile(
    rf"(?:/home/|/Users/|\b[A-Za-z]:[\\/]+Users[\\/]+)[^{_END}]+"   # Linux, macOS, Windows
    r"|/root\b(?![-.]\w)")                                        # not /rootfs, /root.d


def scrub_home(text: str) -> str:
    """Each home folder (``/home/<user>``, ``/Users/<user>``, ``C:\\Users\\<user>``,
    ``/root``) -> ``~``; what follows it in the path stays."""
    if "/" not in text and "\\" not in text:   # most event names: no path at all
        return text
    return HOME.sub("~", text)
