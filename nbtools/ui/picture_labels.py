"""Text in a static picture (ui/picture.py): the lines above a figure, their table rows lined
up, and names inside their boxes, fitted the way BokehJS fits
them in the page: the live view refits a box's name whenever the plot's width or x range
changes (timeline/interactions.py, LABELS_JS), so the names a figure's label source holds
were fitted for the page's width, not the picture's. The picture refits them with its own
font and width: the whole name where it fits, else its start and "…", nothing where fewer
than three characters fit.

A Text glyph is a box's label where the figure says so: the target of a ``link_labels``
callback (the boxes named in its args), or a Text sharing its source with a box glyph
(Quad, HBar) and anchored at that box's ``left``."""
from __future__ import annotations

import math

import numpy as np

BOX_GLYPHS = ("Quad", "HBar")
PAD_PX = 4            # as LABELS_JS: 2 px inside the box's left edge, 2 before its right


# What a character the picture's font lacks is drawn as (Pillow's own font, the one every
# install has, has no "×", "—" or "µ": a table of ratios read "1.05▯", a time "12 ▯s")
_STAND_INS = {"×": "x", "—": "-", "–": "-", "µ": "u", "μ": "u", "✗": "x", "✓": "v", "→": "->",
              "←": "<-", "≤": "<=", "≥": ">=", "≈": "~", "−": "-", "’": "'", "“": '"', "”": '"'}
_HAS: dict = {}


def _has_glyph(font, ch: str) -> bool:
    key = (id(font), ch)
    if key not in _HAS:
        from PIL import Image, ImageDraw

        def ink(c):
            im = Image.new("L", (32, 24), 0)
            ImageDraw.Draw(im).text((2, 2), c, font=font, fill=255)
            return im.tobytes()
        _HAS[key] = ink(ch) != ink("\uffff")       # the font's "no such glyph" box
    return _HAS[key]


def drawable(text: str, font) -> str:
    """``text`` with each character the font cannot draw replaced by its stand-in ("×" ->
    "x", "µ" -> "u", ...), else "?"."""
    text = str(text)
    if text.isascii():
        return text
    return "".join(c if c.isascii() or _has_glyph(font, c) else _STAND_INS.get(c, "?")
                   for c in text)


def elide(text: str, room_px: float, font) -> str:
    """``text`` whole if it fits ``room_px``, else its longest start + "…" that does; ""
    where fewer than three characters would show. Characters the font lacks are drawn as
    their stand-ins (``drawable``)."""
    text = drawable(text, font)
    if font.getlength(text) <= room_px:
        return text
    lo, hi = 0, len(text)
    while lo < hi:                                  # the longest prefix whose elision fits
        mid = (lo + hi + 1) // 2
        if font.getlength(text[:mid] + "…") <= room_px:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] + "…" if lo >= 2 else ""


def _field(glyph, name):
    v = getattr(glyph, name, None)
    f = getattr(v, "field", v)
    return f if isinstance(f, str) else None


def fitted(fig) -> dict:
    """id(label source) -> [(left, right, y, name), ...]: each box the labels of that
    source belong to, with its whole name."""
    out: dict = {}
    for cb in fig.x_range.js_property_callbacks.get("change:start", []):
        args = getattr(cb, "args", None) or {}
        if not {"boxes", "labels", "texts", "ycols"} <= set(args):
            continue
        lookups = args.get("lookups") or [None] * len(args["boxes"])
        for src, ycol, tcol, labels, lut in zip(args["boxes"], args["ycols"], args["texts"],
                                                args["labels"], lookups):
            d = src.data
            if "left" not in d or tcol not in d:
                continue
            names = d[tcol]
            if lut is not None:                       # codes into a one-column table
                table = np.asarray(list(next(iter(lut.data.values()), [])) + [""], object)
                codes = np.asarray(names, float)
                ok = (codes >= 0) & (codes < len(table) - 1)
                names = table[np.where(ok, codes, len(table) - 1).astype(int)]
            count = d.get("count")
            keep = (np.ones(len(names), bool) if count is None
                    else np.asarray(count) <= 1)      # a merged box: several names
            out[id(labels)] = [(lft, rgt, y, str(n)) for k, lft, rgt, y, n
                               in zip(keep, d["left"], d["right"], d[ycol], names) if k]
    for r in fig.renderers:
        g, src = getattr(r, "glyph", None), getattr(r, "data_source", None)
        if type(g).__name__ != "Text" or src is None or id(src) in out:
            continue
        x, text = _field(g, "x"), _field(g, "text")
        for b in fig.renderers:
            bg = getattr(b, "glyph", None)
            if (b is r or getattr(b, "data_source", None) is not src
                    or type(bg).__name__ not in BOX_GLYPHS or _field(bg, "left") != x):
                continue
            d = src.data
            right = _field(bg, "right")
            if right in d and text in d and "y" in d:
                out[id(src)] = list(zip(d[x], d[right], d["y"], map(str, d[text])))
            break
    return out


def draw(draw_, glyph, boxes, X, Y, font, colour, max_labels: int = 4000) -> list:
    """Draw the names of ``boxes`` fitted inside them; returns each label's layout
    {"text", "text_px": (x0, x1), "box_px": (x0, x1), "y"} (tests check it)."""
    baseline = getattr(glyph, "text_baseline", "middle")
    anchor = {"top": "lt", "bottom": "lb"}.get(baseline, "lm")
    if not boxes:
        return []
    left, right, ys, names = zip(*boxes)
    lo, hi = sorted((X.lo, X.hi))
    with np.errstate(invalid="ignore"):
        a = np.maximum(np.asarray(left, float), lo)
        b = np.minimum(np.asarray(right, float), hi)
        px = np.abs(b - a) * abs(X.p1 - X.p0) / ((X.hi - X.lo) or 1)
    # three characters need at least this much room: boxes narrower are skipped unmeasured
    least = font.getlength("ii…") + PAD_PX
    out = []
    for i in np.flatnonzero((b > a) & (px >= least)).tolist():
        py = Y(ys[i])
        if not math.isfinite(py) or not names[i]:
            continue
        x0, x1 = sorted((X(a[i]), X(b[i])))
        text = elide(names[i], x1 - x0 - PAD_PX, font)
        if not text:
            continue
        draw_.text((x0 + PAD_PX / 2, py), text, fill=colour, font=font, anchor=anchor)
        out.append({"text": text, "text_px": (x0 + PAD_PX / 2,
                                              x0 + PAD_PX / 2 + font.getlength(text)),
                    "box_px": (x0, x1), "y": round(py, 1)})
        if len(out) >= max_labels:
            break
    return out


def columns(lines, font) -> dict:
    """Each run of table rows (tuples) among ``lines`` lined up on its own (the summary's
    columns are not the comparison's): line index -> (left edge, width) of every column."""
    out, i = {}, 0
    while i < len(lines):
        if not isinstance(lines[i], tuple):
            i += 1
            continue
        j = i
        while j < len(lines) and isinstance(lines[j], tuple):
            j += 1
        rows = lines[i:j]
        ncol = max(map(len, rows))
        widths = [max((font.getlength(drawable(r[k], font)) for r in rows if k < len(r)),
                      default=0) for k in range(ncol)]
        starts = [8 + sum(widths[:k]) + 14 * k for k in range(ncol)]
        for k in range(i, j):
            out[k] = (starts, widths)
        i = j
    return out


def draw_lines(draw, lines, rows: dict, top: float, width: int, font, line_h: int) -> None:
    """``lines`` from ``top`` down: text cut to ``width`` with "…", table rows' cells
    right-aligned in their columns (``rows``: ``columns``'s answer)."""
    for k, line in enumerate(lines):
        y = top + line_h * k
        if isinstance(line, tuple):        # numbers right-aligned under their header
            starts, widths = rows[k]
            for i, c in enumerate(line):
                draw.text((starts[i] + widths[i], y), drawable(c, font), fill="#222",
                          font=font, anchor="ra")
            continue
        draw.text((8, y), elide(str(line), width - 16, font) or "", fill="#222", font=font)
