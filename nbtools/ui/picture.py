"""A static PNG of any Bokeh layout, drawn in Python from its models (what a saved notebook
shows where no BokehJS runs: a stopped kernel, nbconvert, GitHub): each figure's glyphs
from their ColumnDataSources within the figure's current ranges. Generic over the models,
so it draws whatever figure it is given; a glyph it does not know is left out and named in
the picture's footer."""
from __future__ import annotations

import io
import math

import numpy as np
from PIL import Image, ImageColor, ImageDraw, ImageFont
from PIL.PngImagePlugin import PngInfo

from nbtools.ui import picture_labels

NOTE = "Static picture of the figure as last drawn: re-run the cell for the live, zoomable view."
DEFAULT_W, DEFAULT_H = 900, 300
LEFT, RIGHT, TOP, BOTTOM = 70, 12, 26, 30


def _font(size=11):
    try:
        return ImageFont.load_default(size)
    except TypeError:            # Pillow < 10.1: a fixed bitmap font
        return ImageFont.load_default()


def _rgba(color, alpha=1.0):
    if color is None or (isinstance(color, float) and math.isnan(color)):
        return None
    try:
        if isinstance(color, (tuple, list)):
            rgb = tuple(int(c) for c in color[:3])
            alpha = alpha * (color[3] if len(color) > 3 else 1)
        else:
            rgb = ImageColor.getrgb(str(color))[:3]
    except (ValueError, TypeError):
        rgb = (128, 128, 128)
    alpha = 1.0 if alpha is None else float(alpha)
    if not alpha > 0:
        # nothing to paint: ImageDraw replaces pixels rather than blending, so a transparent
        # box (a hover target over the signals lanes) erased what was drawn beneath it
        return None
    return rgb + (int(255 * max(0.0, min(1.0, alpha))),)


class _Spec:
    """A glyph property resolved against its source: one value per row."""

    def __init__(self, glyph, data, n):
        self.glyph, self.data, self.n = glyph, data, n

    def __call__(self, name, default=None):
        v = getattr(self.glyph, name, default)
        field = getattr(v, "field", None)
        if isinstance(field, str):
            v = field
        elif hasattr(v, "value") and not isinstance(v, (str, float, int)):
            v = v.value
        expr = getattr(v, "expr", None)
        if expr is not None and hasattr(expr, "fields"):          # stack(...): a running sum
            cols = [np.asarray(self.data.get(f, np.zeros(self.n)), float) for f in expr.fields]
            return np.sum(cols, axis=0) if cols else np.zeros(self.n)
        if isinstance(v, str) and v in self.data:
            return _mapped(list(self.data[v]), getattr(getattr(self.glyph, name), "transform",
                                                        None))
        if v is None or isinstance(v, (str, int, float, tuple)):
            return [v] * self.n
        return [default] * self.n


def _mapped(values, transform):
    """A colour mapper applied the way BokehJS would (categorical or linear); others: as is."""
    palette = getattr(transform, "palette", None)
    if not palette:
        return values
    nan = getattr(transform, "nan_color", "gray")
    if hasattr(transform, "factors"):
        index = {f: i for i, f in enumerate(transform.factors)}
        return [palette[index[v] % len(palette)] if v in index else nan for v in values]
    nums = np.asarray(values, float)
    lo = transform.low if transform.low is not None else np.nanmin(nums)
    hi = transform.high if transform.high is not None else np.nanmax(nums)
    k = np.clip((nums - lo) / ((hi - lo) or 1) * len(palette), 0, len(palette) - 1)
    return [nan if math.isnan(i) else palette[int(i)] for i in k]


class _Axis:
    """Data -> pixels along one range (numeric, or a FactorRange's categories)."""

    def __init__(self, rng, values, p0, p1):
        self.factors = None
        if hasattr(rng, "factors"):
            self.factors = {f: i + 0.5 for i, f in enumerate(rng.factors)}
            lo, hi = 0.0, float(len(rng.factors))
        else:
            lo, hi = getattr(rng, "start", None), getattr(rng, "end", None)
            if lo is None or hi is None or (isinstance(lo, float) and math.isnan(lo)):
                finite = [x for x in values if isinstance(x, (int, float)) and math.isfinite(x)]
                lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
            if getattr(rng, "flipped", False):
                lo, hi = hi, lo
        self.lo, self.hi, self.p0, self.p1 = float(lo), float(hi), p0, p1
        if self.hi == self.lo:
            self.hi = self.lo + 1

    def num(self, v):
        if self.factors is not None and not isinstance(v, (int, float, np.floating)):
            return self.factors.get(v, float("nan"))
        try:
            return float(v)
        except (TypeError, ValueError):
            return float("nan")

    def __call__(self, v):
        return self.p0 + (self.num(v) - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)

    def scale(self, d):
        return abs(float(d) / (self.hi - self.lo) * (self.p1 - self.p0))


def _figures_in(model):
    """(figure or None, title) leaves of a layout, in reading order; Tabs draw every panel."""
    if getattr(model, "visible", True) is False:    # hidden in the page: not drawn there
        return []
    if hasattr(model, "renderers") and hasattr(model, "x_range"):
        return [model]
    if hasattr(model, "tabs"):
        return [f for t in model.tabs for f in _figures_in(t.child)]
    out = []
    for c in getattr(model, "children", None) or []:
        out += _figures_in(c[0] if isinstance(c, tuple) else c)
    return out


def _draw_glyph(draw, glyph, data, X, Y, font, skipped):
    n = len(next(iter(data.values()))) if data else 0
    s = _Spec(glyph, data, n)
    kind = type(glyph).__name__
    fill_alpha = s("fill_alpha", 1.0) if hasattr(glyph, "fill_alpha") else [1.0] * n
    fills = s("fill_color") if hasattr(glyph, "fill_color") else [None] * n
    lines = s("line_color") if hasattr(glyph, "line_color") else [None] * n
    line_alpha = s("line_alpha", 1.0) if hasattr(glyph, "line_alpha") else [1.0] * n

    def boxes(l, r, b, t):
        for i in range(n):
            xs, ys = (X(l[i]), X(r[i])), (Y(b[i]), Y(t[i]))
            if not all(map(math.isfinite, xs + ys)):
                continue
            box = [min(xs), min(ys), max(max(xs), min(xs) + 1), max(max(ys), min(ys) + 1)]
            draw.rectangle(box, fill=_rgba(fills[i], fill_alpha[i]),
                           outline=_rgba(lines[i], line_alpha[i]))

    if kind == "Quad":
        boxes(s("left"), s("right"), s("bottom"), s("top"))
    elif kind in ("HBar", "VBar", "Rect"):
        if kind == "HBar":
            y, h = [Y.num(v) for v in s("y")], s("height", 1)
            boxes(s("left", 0), s("right"), [a - hh / 2 for a, hh in zip(y, h)],
                  [a + hh / 2 for a, hh in zip(y, h)])
        elif kind == "VBar":
            x, w = [X.num(v) for v in s("x")], s("width", 1)
            boxes([a - ww / 2 for a, ww in zip(x, w)], [a + ww / 2 for a, ww in zip(x, w)],
                  s("bottom", 0), s("top"))
        else:
            x, y = [X.num(v) for v in s("x")], [Y.num(v) for v in s("y")]
            w, h = s("width", 1), s("height", 1)
            boxes([a - b / 2 for a, b in zip(x, w)], [a + b / 2 for a, b in zip(x, w)],
                  [a - b / 2 for a, b in zip(y, h)], [a + b / 2 for a, b in zip(y, h)])
    elif kind == "Segment":
        for x0, y0, x1, y1, c in zip(s("x0"), s("y0"), s("x1"), s("y1"), lines):
            pts = [X(x0), Y(y0), X(x1), Y(y1)]
            if all(map(math.isfinite, pts)):
                draw.line(pts, fill=_rgba(c), width=1)
    elif kind == "Text":
        colors = s("text_color", "#444")
        for x, y, t, c in zip(s("x"), s("y"), s("text"), colors):
            if t is not None and math.isfinite(X(x)) and math.isfinite(Y(y)):
                draw.text((X(x) + 2, Y(y)), picture_labels.drawable(t, font),
                          fill=_rgba(c or "#444"), font=font,
                          anchor="lm")
    elif kind in ("Scatter", "Circle"):
        sizes = s("size", 6) if kind == "Scatter" else [None] * n
        for x, y, sz, f, c in zip(s("x"), s("y"), sizes, fills, lines):
            px, py = X(x), Y(y)
            if math.isfinite(px) and math.isfinite(py):
                r = (float(sz) if sz else 6.0) / 2
                draw.ellipse([px - r, py - r, px + r, py + r], fill=_rgba(f),
                             outline=_rgba(c))
    elif kind == "Line":
        pts = [(X(x), Y(y)) for x, y in zip(s("x"), s("y"))]
        pts = [p for p in pts if all(map(math.isfinite, p))]
        if len(pts) > 1:
            draw.line(pts, fill=_rgba(getattr(glyph, "line_color", "#1f77b4")), width=2)
    elif kind in ("Patch", "VArea"):
        if kind == "Patch":
            pts = [(X(x), Y(y)) for x, y in zip(s("x"), s("y"))]
            color = getattr(glyph, "fill_color", "#1f77b4")
        else:
            xs = s("x")
            pts = ([(X(x), Y(y)) for x, y in zip(xs, s("y1"))]
                   + [(X(x), Y(y)) for x, y in reversed(list(zip(xs, s("y2"))))])
            color = getattr(glyph, "fill_color", "#1f77b4")
        pts = [p for p in pts if all(map(math.isfinite, p))]
        if len(pts) > 2:
            draw.polygon(pts, fill=_rgba(color, getattr(glyph, "fill_alpha", 1.0) or 1.0))
    else:
        skipped.add(kind)


def _legend(draw, fig, x, font):
    """Each legend's items as swatches in one row under the title."""
    items = [it for lg in getattr(fig, "legend", None) or [] for it in lg.items if it.visible]
    for it in items:
        label = it.label.get("value", "") if isinstance(it.label, dict) else \
            getattr(it.label, "value", it.label) or ""
        glyph = it.renderers[0].glyph if it.renderers else None
        color = getattr(glyph, "fill_color", None) if glyph is not None else None
        rgba = _rgba(color) if isinstance(color, str) else (128, 128, 128, 255)
        draw.rectangle([x, 13, x + 8, 20], fill=rgba)
        label = picture_labels.drawable(label, font)
        draw.text((x + 11, 17), label, fill="#444", font=font, anchor="lm")
        x += 18 + int(draw.textlength(label, font=font))


def _ticks(lo, hi, n=6):
    span = abs(hi - lo) or 1
    step = 10 ** math.floor(math.log10(span / n))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= n:
            step *= m
            break
    a, b = min(lo, hi), max(lo, hi)
    return [k * step for k in range(math.ceil(a / step), math.floor(b / step) + 1)]


def _draw_figure(fig, width, font, skipped, labels: list) -> Image.Image:
    stretch = str(getattr(fig, "sizing_mode", "") or "").startswith(("stretch", "scale"))
    w = int(width if stretch else getattr(fig, "width", None) or width)
    h = int(getattr(fig, "height", None) or getattr(fig, "frame_height", None) or DEFAULT_H)
    img = Image.new("RGBA", (w, h), "white")
    draw = ImageDraw.Draw(img, "RGBA")
    yaxis = (getattr(fig, "yaxis", None) or [None])[0]
    ticks = getattr(getattr(yaxis, "ticker", None), "ticks", None)
    overrides = getattr(yaxis, "major_label_overrides", None) or {}
    ylabels = {t: str(overrides.get(t, overrides.get(str(t), f"{t:g}")))[:40] for t in ticks or []}
    # as wide as the longest lane label needs ("r0 GPU 0 stream 7"), as BokehJS does
    x0 = int(min(max([LEFT] + [font.getlength(v) + 10 for v in ylabels.values()]), w // 3))
    x1, y0, y1 = w - RIGHT, TOP, h - BOTTOM
    renderers = [r for r in fig.renderers
                 if hasattr(r, "glyph") and hasattr(r, "data_source") and r.visible]
    xv, yv = [], []
    for r in renderers:
        for k in ("x", "left", "right", "x0", "x1"):
            col = getattr(r.glyph, k, None)
            if isinstance(col, str) and col in r.data_source.data:
                xv += list(r.data_source.data[col])
        for k in ("y", "top", "bottom", "y0", "y1"):
            col = getattr(r.glyph, k, None)
            if isinstance(col, str) and col in r.data_source.data:
                yv += list(r.data_source.data[col])
    X, Y = _Axis(fig.x_range, xv, x0, x1), _Axis(fig.y_range, yv, y1, y0)
    draw.rectangle([x0, y0, x1, y1], outline=(200, 200, 200, 255))
    title = getattr(getattr(fig, "title", None), "text", "") or ""
    draw.text((x0, 1), picture_labels.elide(title, x1 - x0, font), fill="#222", font=font)
    clip = Image.new("RGBA", (w, h), (255, 255, 255, 0))
    cdraw = ImageDraw.Draw(clip, "RGBA")
    fits = picture_labels.fitted(fig)        # names refitted to this picture's boxes
    for r in renderers:
        if id(r.data_source) in fits and type(r.glyph).__name__ == "Text":
            colour = _rgba(getattr(r.glyph, "text_color", None) or "#444") or "#444"
            labels += picture_labels.draw(cdraw, r.glyph, fits[id(r.data_source)], X, Y,
                                          font, colour)
            continue
        _draw_glyph(cdraw, r.glyph, dict(r.data_source.data), X, Y, font, skipped)
    img.alpha_composite(clip.crop((x0, y0, x1, y1)), (x0, y0))   # glyphs clipped to the frame
    if X.factors is None:
        label = _tick_label(getattr(fig.xaxis[0], "formatter", None) if fig.xaxis else None)
        for t in _ticks(X.lo, X.hi):
            px = X(t)
            draw.line([px, y1, px, y1 + 4], fill="#888")
            draw.text((px, y1 + 6), label(t), fill="#444", font=font, anchor="mt")
    else:
        for f, v in X.factors.items():
            draw.text((X(v), y1 + 6), picture_labels.drawable(str(f)[:14], font), fill="#444",
                      font=font, anchor="mt")
    for t, label in ylabels.items():
        draw.text((x0 - 4, Y(t)), picture_labels.drawable(label, font), fill="#444",
                  font=font, anchor="rm")
    _legend(draw, fig, x0, font)
    if Y.factors is not None:
        for f, v in Y.factors.items():
            draw.text((x0 - 4, Y(v)), picture_labels.drawable(str(f)[:10], font),
                      fill="#444", font=font, anchor="rm")
    return img


def _tick_label(formatter):
    """A tick's text. An axis cut where nothing happens (the compile strip's, its formatter
    holding the knots real -> axis) reads real seconds, and nothing inside a cut."""
    args = getattr(formatter, "args", None) or {}
    if "real" not in args or "axis" not in args:
        return lambda t: f"{t:g}"
    real, axis = np.asarray(args["real"], float), np.asarray(args["axis"], float)

    def label(t):
        k = int(np.clip(np.searchsorted(axis, t) - 1, 0, len(axis) - 2))
        a0, a1, r0, r1 = axis[k], axis[k + 1], real[k], real[k + 1]
        if a0 < t < a1 and r1 - r0 > (a1 - a0) * 1.001:
            return ""
        return f"{float(np.interp(t, axis, real)) + min(t - axis[0], 0) + max(t - axis[-1], 0):g}"
    return label


def _notices(model) -> list:
    """The text of the visible notices in a layout (a failed run's line)."""
    import re
    if getattr(model, "visible", True) is False:
        return []
    if str(getattr(model, "name", "") or "").endswith("notice") and getattr(model, "text", ""):
        return [re.sub(r"<[^>]+>", "", model.text)]
    out = []
    for c in getattr(model, "children", None) or []:
        out += _notices(c[0] if isinstance(c, tuple) else c)
    return out


LINE_H = 16
MAX_W = 3000      # px: a picture widens to show a table whole, up to this


def picture(layout, width: int = DEFAULT_W, header=(), sections=()) -> Image.Image:
    """The layout's figures stacked top to bottom under ``header`` (lines of text: the
    panel's run, config and summary; a tuple is a table row, its cells lined up with the
    rows next to it), then each of ``sections`` ((lines, layout or None): the panel's
    comparison, its exploration) the same way, and a footer saying it is static. The
    picture is as wide as its widest figure or table (up to MAX_W), so no table is cut.
    ``info``: what was left out ("skipped"), each box label's layout ("labels"), the text
    ("text")."""
    font, skipped, labels = _font(), set(), []
    blocks, leaves, notices = [], [], []
    for lines, model in [(list(header), layout)] + [(list(ln), m) for ln, m in sections]:
        figs = []
        for f in (_figures_in(model) if model is not None else []):
            first = len(labels)
            figs.append(_draw_figure(f, width, font, skipped, labels))
            for lab in labels[first:]:
                lab["figure"] = len(leaves)
            leaves.append(f)
        notices += _notices(model) if model is not None else []
        blocks.append((lines, picture_labels.columns(lines, font), figs))
    footer = notices + [NOTE] + ([f"(not drawn here: {', '.join(sorted(skipped))})"]
                                 if skipped else [])
    tables = [starts[-1] + widths[-1] + 8 for _, rows, _ in blocks
              for starts, widths in rows.values()]
    w = int(min(MAX_W, max([f.width for _, _, figs in blocks for f in figs] + [width]
                           + tables)))
    h = sum(LINE_H * len(lines) + (8 if lines else 0) + sum(f.height for f in figs)
            for lines, _, figs in blocks) + LINE_H * len(footer) + 8
    out = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(out)
    y, tops = 0, []
    for lines, rows, figs in blocks:
        picture_labels.draw_lines(draw, lines, rows, y + 4, w, font, LINE_H)
        y += LINE_H * len(lines) + (8 if lines else 0)
        for f in figs:
            out.paste(f.convert("RGB"), (0, y))
            tops.append(y)
            y += f.height
    for lab in labels:
        lab["top"] = tops[lab["figure"]]
    for line in footer:
        draw.text((LEFT, y + 4), picture_labels.drawable(line, font), fill="#666", font=font)
        y += LINE_H
    titles = [getattr(getattr(f, "title", None), "text", "") or "" for f in leaves]
    text = [ln if isinstance(ln, str) else "  ".join(map(str, ln))
            for lines, _, _ in blocks for ln in lines]
    out.info.update(skipped=sorted(skipped), labels=labels,
                    text="\n".join(text + [t for t in titles if t]))
    return out


def png(layout, width: int = DEFAULT_W, header=(), sections=()) -> bytes:
    """The picture as PNG bytes; its text (header, sections and titles) also in a tEXt
    chunk, so a program can tell which run a saved picture shows."""
    img = picture(layout, width, header, sections)
    meta = PngInfo()
    meta.add_text("Description", img.info["text"])
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True, pnginfo=meta)
    return buf.getvalue()
