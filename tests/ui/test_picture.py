"""The static picture a saved notebook shows without a kernel (ui/picture.py): drawn from
the Bokeh models themselves, for whatever figure it is given, and carried by every live
figure output beside the widget view (ui/display.py)."""
from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from bokeh.layouts import column, row
from bokeh.models import TabPanel, Tabs
from bokeh.plotting import figure
from PIL import Image

from nbtools.ui import picture
from nbtools.ui.display import FIGURE_MIME, WIDGET_MIME, Figure

from support.runs import synthetic_run


def _coloured(img, box=None) -> int:
    rgb = np.asarray((img.crop(box) if box else img).convert("RGB"), np.int16)
    return int(((rgb.max(axis=2) - rgb.min(axis=2)) > 60).sum())


def _red(img) -> int:
    rgb = np.asarray(img.convert("RGB"), np.int16)
    return int(((rgb[..., 0] > 200) & (rgb[..., 1] < 60) & (rgb[..., 2] < 60)).sum())


def test_every_known_glyph_draws_inside_the_current_ranges():
    """One figure per glyph kind, each drawing only red: every one leaves red pixels; a
    glyph outside the figure's x-range leaves none (the current ranges, not the data's)."""
    kinds = {
        "quad": lambda f: f.quad(left=[1], right=[3], bottom=[1], top=[3], color="red"),
        "rect": lambda f: f.rect(x=[2], y=[2], width=[2], height=[2], color="red"),
        "vbar": lambda f: f.vbar(x=[2], top=[3], width=1, color="red"),
        "hbar": lambda f: f.hbar(y=[2], right=[3], height=1, color="red"),
        "segment": lambda f: f.segment(x0=[0], y0=[0], x1=[4], y1=[4], color="red", line_width=3),
        "scatter": lambda f: f.scatter(x=[2], y=[2], size=20, color="red"),
        "line": lambda f: f.line(x=[0, 2, 4], y=[0, 4, 0], color="red", line_width=3),
        "patch": lambda f: f.patch(x=[0, 4, 2], y=[0, 0, 4], color="red"),
        "varea": lambda f: f.varea(x=[0, 4], y1=[0, 0], y2=[3, 3], color="red"),
        "text": lambda f: f.text(x=[1], y=[2], text=["WWWW"], text_color="red"),
    }
    for name, add in kinds.items():
        f = figure(width=300, height=200, x_range=(0, 4), y_range=(0, 4))
        add(f)
        img = picture.picture(f)
        assert _red(img) > 10, f"{name}: nothing drawn"
        assert img.info["skipped"] == [], name
        off = figure(width=300, height=200, x_range=(10, 20), y_range=(0, 4))
        add(off)
        assert _red(picture.picture(off)) == 0, f"{name}: drawn outside the x-range"


def test_layouts_tabs_and_unknown_glyphs():
    a = figure(width=300, height=150, x_range=(0, 1), y_range=(0, 1))
    a.quad(left=[0], right=[1], bottom=[0], top=[1], color="red")
    b = figure(width=300, height=150, x_range=(0, 1), y_range=(0, 1))
    b.wedge(x=[0.5], y=[0.5], radius=0.3, start_angle=0, end_angle=1)
    layout = column(row(a), Tabs(tabs=[TabPanel(child=b, title="b")]))
    img = picture.picture(layout)
    assert img.height >= 300 and _red(img) > 1000
    assert img.info["skipped"] == ["Wedge"]


def test_timeline_picture_shows_each_rank_and_the_note():
    """The real timeline (whatever glyphs it uses): coloured boxes, within its size."""
    from nbtools.ui.timeline import Timeline
    img = Image.open(io.BytesIO(picture.png(Timeline(synthetic_run()).layout)))
    assert img.width >= 600 and img.height > 200
    assert _coloured(img) > 20_000, "the timeline picture holds no boxes"


def test_a_figure_output_carries_its_picture_beside_the_widget():
    from nbtools.ui.timeline import Timeline
    fig = Figure(Timeline(synthetic_run()).layout)
    bundle = fig._repr_mimebundle_()
    assert WIDGET_MIME in bundle and FIGURE_MIME in bundle
    assert bundle[FIGURE_MIME]["model_id"] == bundle[WIDGET_MIME]["model_id"]
    png = base64.b64decode(bundle["image/png"])
    assert Image.open(io.BytesIO(png)).width >= 600 and len(png) < 300_000
    assert "re-run the cell" in bundle["text/plain"]


def _black_outside(img, labels) -> list:
    """Near-black pixels (the names' #111) in each name's row band, right of the leftmost
    box (the lane names are left of the frame), that lie in no box holding a name on that
    row: ink spilled out of its box."""
    rgb = np.asarray(img.convert("RGB"), np.int16)
    dark = (rgb < 70).all(axis=2)
    out = []
    rows = {}
    for lab in labels:
        rows.setdefault(round(lab["top"] + lab["y"]), []).append(lab["box_px"])
    for y, boxes in rows.items():
        band = dark[max(0, y - 4):y + 5]
        cols = np.flatnonzero(band.any(axis=0))
        cols = cols[cols >= min(x0 for x0, _ in boxes) - 1]
        inside = np.zeros(len(cols), bool)
        for x0, x1 in boxes:
            inside |= (cols >= x0 - 1) & (cols <= x1 + 1)
        out += [(y, int(c)) for c in cols[~inside]]
    return out


@pytest.mark.parametrize("width", [900, 420])
def test_a_runs_names_stay_inside_their_boxes(width):
    """The names a run's static picture draws are refitted to the picture's own boxes (the
    page fitted them for its width): by the renderer's layout every name lies inside its
    box, and no name's ink lies outside the boxes of its row."""
    from nbtools.ui.timeline import Timeline
    tl = Timeline(synthetic_run(events_per_rank=400))
    img = picture.picture(tl.layout, width=width)
    labels = img.info["labels"]
    assert len(labels) >= 6, labels       # step names at least, on every rank
    spilled = [lab for lab in labels if not (lab["box_px"][0] <= lab["text_px"][0]
                                             and lab["text_px"][1] <= lab["box_px"][1])]
    assert not spilled, spilled[:5]
    names = [lab for lab in labels if "ProfilerStep" in lab["text"]]
    assert names, [lab["text"] for lab in labels]
    assert not _black_outside(img, names)


def test_a_long_name_in_a_narrow_box_is_elided_not_spilled():
    """A box's label sharing its source and left edge (as the compile strip's cuts do): in
    the page it would run past the box; the picture cuts it with "…" inside the box."""
    from bokeh.models import ColumnDataSource
    src = ColumnDataSource(dict(left=[1.0], right=[2.0], y=[1.0],
                                text=["a very long name that cannot fit in its box"]))
    f = figure(width=400, height=120, x_range=(0, 4), y_range=(0, 2))
    f.quad(left="left", right="right", bottom=0.5, top=1.5, fill_color="#dddddd",
           line_color=None, source=src)
    f.text(x="left", y="y", text="text", text_color="#111111", text_baseline="middle",
           source=src)
    img = picture.picture(f)
    [lab] = img.info["labels"]
    assert lab["text"].endswith("…") and len(lab["text"]) < 20, lab
    assert lab["text_px"][1] <= lab["box_px"][1]
    assert not _black_outside(img, [lab])


def test_a_figures_picture_follows_its_zoom():
    """The picture a live figure keeps for the saved notebook is redrawn after a change of
    its document (a zoom from the page arrives as one): the same renderer, the new range."""
    from nbtools.ui.bokehjs import LiveBokehModel
    from nbtools.ui.saved_picture import PICTURE
    f = figure(width=300, height=150, x_range=(0, 10), y_range=(0, 1))
    f.quad(left=[0], right=[1], bottom=[0], top=[1], color="red")
    view = LiveBokehModel(f, pictured=True)
    before = view.picture()
    assert getattr(view, PICTURE) == before
    whole = _red(Image.open(io.BytesIO(base64.b64decode(before))))
    f.x_range.end = 2                           # zoomed in: the box is 5x wider
    after = view.picture()
    assert getattr(view, PICTURE) == after != before
    assert _red(Image.open(io.BytesIO(base64.b64decode(after)))) > 3 * whole
    view.close()


def test_a_live_figures_repr_names_it_without_its_data():
    """A message naming the widget (a traceback, a warning) stays one short line: the
    render bundle's base64 arrays in a cell's stderr read as file paths to JupyterLab, which
    asked the server about each (a name too long for the file system: a server 500)."""
    import re
    from nbtools.ui.bokehjs import LiveBokehModel
    from nbtools.ui.timeline import Timeline
    view = LiveBokehModel(Timeline(synthetic_run()).layout, pictured=True)
    view.picture()
    text = repr(view)
    assert len(text) < 200 and view.model_id in text, text
    assert not re.search(r"[A-Za-z0-9+/=]{40,}", text), text
    view.close()
    view.close()                          # again, as __del__ does: nothing raised


def _ink_columns(img) -> np.ndarray:
    """Which pixel columns hold any dark ink (text)."""
    rgb = np.asarray(img.convert("L"), np.int16)
    return np.nonzero((rgb < 128).any(axis=0))[0]


def test_a_wide_table_widens_the_picture_instead_of_being_cut():
    """issue 44: the panel's saved picture clipped its summary table at 900 px."""
    head = tuple(f"column_{i}_ms" for i in range(16))
    row = tuple(f"{1000 + i}.5" for i in range(16))
    img = picture.picture(figure(width=400, height=120), header=[head, row],
                          sections=[(["compare: A vs B", ("metric", "a", "b"),
                                      ("step_ms", "1", "2")], None)])
    font = picture._font()
    need = sum(font.getlength(c) for c in head) + 14 * (len(head) - 1) + 8
    assert img.width >= need > picture.DEFAULT_W, (img.width, need)
    assert _ink_columns(img).max() < img.width - 4          # its last column drawn inside
    assert "compare: A vs B" in img.info["text"] and "step_ms  1  2" in img.info["text"]


def test_characters_the_font_lacks_are_drawn_as_stand_ins():
    """Pillow's own font has no "×", "—" or "µ": a ratio read "1.05" and a box."""
    from nbtools.ui.picture_labels import drawable
    font = picture._font()
    assert drawable("1.05× (0.98–1.10) — 12 µs", font) == "1.05x (0.98-1.10) - 12 us"
    assert drawable("2 ranks · 300 events …", font) == "2 ranks · 300 events …"    # it has these
    a = picture.picture(figure(width=300, height=80), header=[("ratio",), ("1.05×",)])
    b = picture.picture(figure(width=300, height=80), header=[("ratio",), ("1.05x",)])
    assert np.array_equal(np.asarray(a), np.asarray(b))
