"""common: text that can be written: a lone surrogate ("\\ud800", what Python makes of an
undecodable file name) is valid in a str but not in UTF-8, so every writer would fail on it."""
from __future__ import annotations


def valid_text(s: str) -> str:
    """``s`` with each lone surrogate shown as '?'; ``s`` itself when it has none (ASCII
    text, most of it, is checked in C without a copy)."""
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "replace").decode("utf-8")


def valid_texts(o):
    """Every str inside dicts, lists and tuples made writable (keys too); other values as
    they are. Depth is what the caller's data has (reports, notes): small, plain."""
    if isinstance(o, str):
        return valid_text(o)
    if isinstance(o, dict):
        return {valid_texts(k): valid_texts(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return type(o)(valid_texts(v) for v in o)
    return o


# C0 controls but tab and newline, DEL, C1 controls: a file name holding "\x1b[2J" clears the
# screen of whoever views it, "\r" hides what came before it on the line
_CONTROL = dict.fromkeys([*range(0x09), *range(0x0b, 0x20), 0x7f, *range(0x80, 0xa0)])


def terminal_text(s: str) -> str:
    """``s`` safe to print to a terminal: every control character (escape sequences, \\r,
    bells) but newline and tab shown as '?'; writable text (valid_text) besides."""
    s = valid_text(str(s))
    if s.isprintable() or not any(ord(c) in _CONTROL for c in s):
        return s
    return s.translate({c: "?" for c in _CONTROL})
