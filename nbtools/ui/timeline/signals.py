"""ui: the signals lanes under the streams: per rank, a row per signal the machine gave
(``run.samples``: GPU busy, SM clock, power, temperature, PCIe/NVLink on a GPU; the
process's CPU and memory, the host's CPU and load everywhere), each drawn as a step area
(a sample's value holds until the next sample) on the timeline's x axis, so the signals
zoom and pan with the kernels. Behind each rank's rows its warm-up, measured and profiled
steps and its compiles are shaded, for when the view is zoomed out past the profiled
steps. The hover gives row, value with its unit (the clock event reasons in words) and
time. Numbers only per sample: labels, units and reason words are small tables the page
reads (``rows_source``, ``units``, ``texts_source``). Renderers are named ``signals-...``;
hidden for runs without samples.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from bokeh.models import ColumnDataSource, CustomJSHover, HoverTool
from bokeh.transform import linear_cmap

from nbtools.analysis import samples as S
from nbtools.schema.signals import BY_NAME, SIGNALS
from nbtools.ui.timeline.compile_strip import PHASE_COLOUR, untimed
from nbtools.ui.timeline.lane import Lane

MAX_POINTS = 1000      # bins per row: past it, each keeps its lowest and highest sample
FIELDS = ("left", "right", "bottom", "top", "band", "value", "row", "sig", "text")
BAND_FIELDS = ("left", "right", "bottom", "top", "color")
ROW_PX = 22
# one colour per signal, in SIGNALS' order (utilisations blue, clocks and power warm, ...)
PALETTE = ("#3182bd", "#08519c", "#6baed6", "#756bb1", "#9ecae1", "#e6550d", "#d62728",
           "#fd8d3c", "#31a354", "#cb181d", "#8c6d31", "#bd9e39", "#637939", "#8ca252",
           "#17becf", "#2ca02c", "#e377c2", "#9467bd")
COMPILE_BAND = "#fdae6b"
VALUE_JS = """
const i = special_vars.index, t = src.data.text[i];
if (t >= 0) return String(texts.data.text[t] ?? "");
const u = units[src.data.sig[i]] ?? "", a = Math.abs(value);
const d = a >= 100 ? 0 : a >= 10 ? 1 : 2;
return value.toLocaleString("en-US", {maximumFractionDigits: d}) + (u ? " " + u : "");"""


def _decimate(ts: np.ndarray, v: np.ndarray, n: int = MAX_POINTS):
    """At most about 2n samples: per time bin its lowest and highest (a dip or a spike of
    one sample stays in the picture), in time order."""
    if len(ts) <= n:
        return ts, v
    b = np.clip(((ts - ts[0]) * n // max(ts[-1] - ts[0], 1)).astype(np.int64), 0, n - 1)
    starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
    ends = np.r_[starts[1:], len(ts)]
    keep = set()
    for s, e in zip(starts.tolist(), ends.tolist()):
        seg = v[s:e]
        keep.add(s + int(np.argmin(seg)))
        keep.add(s + int(np.argmax(seg)))
    idx = np.array(sorted(keep))
    return ts[idx], v[idx]


def _machine(run, r) -> dict:
    """The rank's machine report (its limits scale the lanes); a report's copy of a run
    keeps no ranks, so there the summary's clock maximum stands in."""
    m = (run.ranks.get(r) or run.ranks.get(str(r)) or {}) if isinstance(run.ranks, dict) else {}
    m = m.get("machine") if isinstance(m, dict) else None
    if isinstance(m, dict) and m:
        return m
    sm = run.summary
    if sm is not None and len(sm) and "sm_clock_max_mhz" in sm and "rank" in sm:
        row = sm[sm["rank"] == r]
        if len(row):
            return {"sm_max_mhz": row["sm_clock_max_mhz"].iloc[0]}
    return {}


def signals_data(run, ranks: list, t0: int, only=None) -> tuple[dict, dict, dict, list]:
    """(the samples' source, the phase and compile bands' source, the row labels {row:
    text}, the reason words the throttle rows' texts index) for ``ranks``' rows. ``only``:
    the signals to draw (names of schema/signals.SIGNALS), default every one sampled."""
    out = {k: [] for k in FIELDS}
    bands = {k: [] for k in BAND_FIELDS}
    smp = getattr(run, "samples", None)
    if smp is None or not len(smp):
        return out, bands, {}, []
    order = {s.name: i for i, s in enumerate(SIGNALS)}
    rows = signal_rows(smp)
    labels, parts, texts, row = {}, [], {}, 0
    for r in ranks:
        names = [n for rk, n in rows if rk == r and (only is None or n in only)]
        if not names:
            continue
        first, m = row, _machine(run, r)
        for name in names:
            ts, v = S.series(smp, r, name)
            ts, v = _decimate(ts, v)
            sig = BY_NAME.get(name)
            label = sig.label if sig else name
            if name == "throttle":
                bits = np.nan_to_num(v).astype(np.int64)
                shown = ((bits & S.THROTTLING) != 0).astype(float)
                words = [", ".join(S.reason_words(b)) or "none" for b in bits.tolist()]
                text = np.array([texts.setdefault(w, len(texts)) for w in words], np.int64)
                scale, tag = 1.0, "throttling"
            else:
                shown, text = v, np.full(len(v), -1, np.int64)
                scale = S.scale_of(name, v, m)
                unit = sig.unit if sig else ""
                tag = f"of {scale:,.0f} {unit}".strip() if sig and not isinstance(
                    sig.scale, float) else unit
            gap = np.median(np.diff(ts)) if len(ts) > 1 else 50_000_000
            end = np.r_[ts[1:], ts[-1] + gap]
            base = row + 0.4
            # float32 and int16 columns: an exported page carries half the bytes of float64
            f32 = (lambda x: np.asarray(x, np.float32))
            parts.append(dict(left=f32((ts - t0) / 1e6), right=f32((end - t0) / 1e6),
                              bottom=f32(np.full(len(ts), base)),
                              top=f32(base - 0.8 * np.clip(np.nan_to_num(shown) / scale, 0, 1)),
                              band=f32(np.full(len(ts), row - 0.5)), value=f32(v),
                              row=np.full(len(ts), row, np.int16),
                              sig=np.full(len(ts), order.get(name, len(order)), np.int16),
                              text=text.astype(np.int16)))
            labels[row] = f"r{r} {label}" + (f" ({tag})" if tag else "")
            row += 1
        _bands(bands, run, r, first - 0.5, row - 0.5, t0)
    out = {k: np.concatenate([p[k] for p in parts]) for k in FIELDS}
    return out, bands, labels, list(texts)


def _bands(bands: dict, run, r: int, top: float, bottom: float, t0: int) -> None:
    """Rank ``r``'s phases (first step's start to last step's end) and compiles, shaded
    behind its rows."""
    st = run.steps[run.steps["rank"] == r] if len(run.steps) else run.steps
    spans = []
    for phase, g in (st.groupby(st["phase"].astype(str)) if len(st) else ()):
        spans.append((int(g["ts_ns"].min()), int((g["ts_ns"] + g["dur_ns"]).max()),
                      PHASE_COLOUR.get(phase, "#eeeeee")))
    ce = run.compile_events
    if len(ce):
        ce = ce[(ce["rank"] == r) & ~untimed(ce) & (ce["dur_ns"] > 0)]
        spans += [(int(a), int(a + d), COMPILE_BAND)
                  for a, d in zip(ce["ts_ns"].tolist(), ce["dur_ns"].tolist())]
    for lo, hi, color in spans:
        bands["left"].append((lo - t0) / 1e6)
        bands["right"].append((hi - t0) / 1e6)
        bands["bottom"].append(bottom)
        bands["top"].append(top)
        bands["color"].append(color)


class SignalsLane(Lane):
    """One figure on the timeline's x range; ``update`` replaces its data."""

    def __init__(self, size: dict, backend: str, x_range):
        self.source = ColumnDataSource({k: [] for k in FIELDS})
        self.band_source = ColumnDataSource({k: [] for k in BAND_FIELDS})
        self.rows_source = ColumnDataSource(dict(label=[]))
        self.texts_source = ColumnDataSource(dict(text=[]))
        super().__init__(size, backend, x_range, name="signals-lane", height=120,
                         title="machine signals · each rank's GPU and host, sampled through the "
                               "run (phases and compiles shaded behind)",
                         x_axis_label="ms since the first profiled event")
        fig = self.figure
        fig.quad(left="left", right="right", bottom="bottom", top="top", fill_color="color",
                 fill_alpha=0.25, line_color=None, source=self.band_source,
                 name="signals-phases")
        fig.quad(left="left", right="right", bottom="bottom", top="top",
                 fill_color=linear_cmap("sig", PALETTE, low=-0.5, high=len(PALETTE) - 0.5,
                                        low_color="#7f7f7f", high_color="#7f7f7f"),
                 fill_alpha=0.85, line_color=None, source=self.source, name="signals-values")
        # the hover reads a full-height invisible box per sample: a value of 0 is hoverable
        hover = fig.quad(left="left", right="right", bottom="band", top="bottom",
                         fill_alpha=0, line_alpha=0, source=self.source, name="signals-hover")
        units = [s.unit for s in SIGNALS]
        fig.add_tools(HoverTool(renderers=[hover], point_policy="follow_mouse", tooltips=[
            ("", "@row{custom}"), ("value", "@value{custom}"), ("at", "@left{0,0.000} ms")],
            formatters={"@row": CustomJSHover(args=dict(rows=self.rows_source), code=(
                "return String(rows.data.label[value] ?? '');")),
                "@value": CustomJSHover(args=dict(src=self.source, texts=self.texts_source,
                                                  units=units), code=VALUE_JS)}))

    def update(self, run, ranks: list, t0: int, only=None) -> None:
        """Redraw the lanes for ``ranks`` from ``t0``; hidden when the run has no samples."""
        data, bands, labels, texts = signals_data(run, ranks, t0, only)
        self.texts_source.data = dict(text=texts)
        self.rows_source.data = dict(label=[labels.get(i, "") for i in range(len(labels))])
        self.band_source.data = bands
        self.source.data = data
        self.show_rows(labels, len(labels), ROW_PX)


def signal_rows(samples: pd.DataFrame) -> list:
    """The (rank, signal) pairs a run's samples hold, by rank, then in SIGNALS' order: the
    rows its lanes draw."""
    if samples is None or not len(samples):
        return []
    order = {s.name: i for i, s in enumerate(SIGNALS)}
    pairs = samples.groupby(["rank", "signal"], observed=True).size()
    return sorted(((int(r), str(s)) for (r, s), n in pairs.items() if n),
                  key=lambda p: (p[0], order.get(p[1], len(order))))
