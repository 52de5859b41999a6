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
