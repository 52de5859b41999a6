"""widgets: the panel's export row. Export writes export_html of the runs picked (with the
panel's comparison and exploration) and "Save Perfetto trace" the run on screen, both
beside their own status line; like the calls they make they refuse a file nbtools did not
write, and the panel's "replace" box is their force=True, armed for one write."""
from __future__ import annotations

import html
from pathlib import Path

import ipywidgets as W

from nbtools.common.outputs import output_refusal
from nbtools.report.html import export_html
from nbtools.widgets.panel_parts import Ticker, button, html_widget
from nbtools.widgets.panel_work import say


def explorations(panel) -> list:
    """Every exploration the lab made (lab.explore in the notebook, or the panel's Explore),
    in order, and the panel's own if the lab does not hold it."""
    out = list(getattr(panel.lab, "explorations", None) or ())
    if panel.exploration is not None and not any(e is panel.exploration for e in out):
        out.append(panel.exploration)
    return out


class Exporter:
    """The export row's widgets and its two actions, for ``panel``."""

    def __init__(self, panel, export_path):
        self.panel = panel
        self.path = W.Text(value=str(export_path), description="export to",
                           layout=W.Layout(width="520px"))
        self.notes = W.Textarea(placeholder="notes for the report (Markdown)",
                                layout=W.Layout(width="720px", height="60px"))
        self.button = button("Export HTML", lambda: self.export(), icon="download")
        self.perfetto_button = button("Save Perfetto trace", lambda: self.save_perfetto(),
                                      icon="share",
                                      layout=W.Layout(width="auto", flex="0 0 auto"))
        self.replace = W.Checkbox(value=False, description="replace", indent=False,
                                  tooltip="replace a file at that path that nbtools did not "
                                  "write (a notebook, a trace, your file)",
                                  layout=W.Layout(width="90px", flex="0 0 auto"))
        self.status = html_widget("", "nbtools-export-status")

    def export(self):
        """export_html of the runs picked in the export list (plus the current A/B pair,
        when both are among them) to the path given; the status counts the seconds."""
        p = self.panel
        if p.work.busy(self.status, "Export"):
            return None
        path = Path(self.path.value).expanduser()
        ids = list(p.export_runs.value)
        if not ids:
            say(self.status, "pick the runs to export in the list above the Export "
                "button", error=True)
            return None
        if self._refused(path, parents=True):
            return None
        runs = [p.lab.history[r] for r in ids]
        pair = (p.compare_a.value, p.compare_b.value)
        both = all(pair) and pair[0] != pair[1] and set(pair) <= set(ids)
        try:
            with Ticker(self.status, f"exporting {len(runs)} runs…") as tick:
                out = export_html(path, runs, notes=self.notes.value,
                                  comparisons=[p.comparison] if p.comparison is not None
                                  else [pair] if both else (),
                                  explorations=explorations(p),
                                  force=self.replace.value)
        except Exception as e:  # noqa: BLE001 - said beside the button, the panel goes on
            say(self.status, f"export failed: {type(e).__name__}: {e}", error=True)
            return None
        self.replace.value = False
        self.status.value = (f"wrote {html.escape(str(out))} ({out.stat().st_size / 1e6:.1f} MB, "
                             f"{len(runs)} runs, {tick.elapsed:.1f} s)")
        return out

    def _refused(self, path: Path, parents: bool = False) -> bool:
        """A path Export or Save would refuse, said in the panel's own terms (its "replace"
        box is the force=True a call would take)."""
        why = output_refusal(path, "tick \"replace\" beside the path",
                             force=self.replace.value, parents=parents)
        if why:
            say(self.status, f"not written: {why}", error=True)
        return bool(why)

    def save_perfetto(self):
        """The run in the timeline as one Chrome-trace JSON beside the export path (open it at
        ui.perfetto.dev: Open trace file)."""
        p = self.panel
        if p.work.busy(self.status, "Save Perfetto trace"):
            return None
        path = Path(self.path.value).expanduser().with_suffix(".perfetto.json")
        if p.shown is None:
            return say(self.status, "no run in the timeline yet: run or pick one first",
                       error=True)
        if self._refused(path):
            return None
        try:
            out = p.shown.to_perfetto(path, force=self.replace.value)
        except Exception as e:  # noqa: BLE001 - said beside the button, the panel goes on
            return say(self.status, f"Perfetto trace not written: {type(e).__name__}: "
                       f"{e}", error=True)
        self.replace.value = False
        self.status.value = f"wrote {html.escape(str(out))}: open it at ui.perfetto.dev"
        return out
