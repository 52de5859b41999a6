"""The one HTML renderer of results: a run's header, flags, errors and summary table, an A/B
comparison and the error box text. The panel, ``run``/``comparison`` in a notebook cell and
the report all take their pieces from here. Plain strings from Runs, comparisons and
exceptions: no widgets involved.
"""
from __future__ import annotations

import html
import os
import re

from nbtools.results.errors import LabClosed, RunTimeout
from nbtools.results.torch_trace import link_html
from nbtools.ui.summary_view import BAD, GOOD, metric_rows, summary_table

FLAG_STYLE = "color:#a40000"


def describe_error(err) -> str:
    """The error box text: the kind, the message (it names the root-cause rank), and each
    rank's first error line for a failed run."""
    e = html.escape
    text = f"<b>{type(err).__name__}</b>: {e(str(err))}"
    run = getattr(err, "run", None)
    if isinstance(err, RunTimeout):
        text += "\n→ press 'Restart engines' (the history is kept)"
    elif isinstance(err, LabClosed):
        text += "\n→ press 'Restart engines' to start fresh engines for this panel"
    if run is not None and run.errors:
        text += "".join(f"\nrank {r}: {e(msg.splitlines()[0] if msg else '')}"
                        for r, msg in sorted(run.errors.items()))
        # the traceback of the rank the message blames (the root cause, not a peer's abort)
        m = re.search(r"rank (\d+):", str(err))
        r0 = int(m.group(1)) if m and int(m.group(1)) in run.errors else min(run.errors)
        text += f"<details><summary>rank {r0} traceback</summary>{e(run.errors[r0])}</details>"
    return text


def flags_html(flags) -> str:
    """A run's flags, one line each (what they mean: docs/flags.md)."""
    return "".join(f"<div class='flag' style='{FLAG_STYLE}'>⚑ {html.escape(str(f))}</div>"
                   for f in flags)


def errors_html(run, lines: int = 1) -> str:
    """Each failed rank's first ``lines`` error lines."""
    return "".join(f"<div class='flag' style='{FLAG_STYLE}'>rank {r} failed:</div>"
                   f"<pre>{html.escape(_head(msg or '', lines))}</pre>"
                   for r, msg in sorted(run.errors.items()))


def _head(text: str, n: int) -> str:
    lines = str(text).splitlines()
    return "\n".join(lines[:n]) + (f"\n… ({len(lines) - n} more lines)" if len(lines) > n else "")


def run_html(run) -> str:
    """A run in a notebook cell: its header, flags, errors and summary table."""
    return summary_html(run, details=True)


def summary_html(run, details: bool = False) -> str:
    """The header line (label, ranks, events, notes, the TORCH_TRACE report link) and the
    summary table; ``details`` adds the flags and each failed rank's error line (the panel
    shows those in boxes of their own)."""
    s = run.summary
    notes = sorted({n for rep in run.ranks.values() for n in (rep or {}).get("notes") or ()})
    head = (f"<b>{html.escape(run.label)}</b> · {run.world_size} ranks · {len(run.events):,} "
            f"events · {len(run.compile_events):,} compile events"
            + (f" · {html.escape('; '.join(notes))}" if notes else "")
            + link_html(run, base=os.getcwd(), jupyter=True))
    if details:
        head += flags_html(run.flags) + errors_html(run)
    if not len(s):
        return head
    return head + summary_table(s)


def comparison_html(cmp) -> str:
    """A comparison as HTML: the runs, the config diff, the metrics with the verdict, and
    time per category."""
    diff = "".join(f"<li><code>{html.escape(k)}</code>: {html.escape(repr(a))} → "
                   f"{html.escape(repr(b))}</li>" for k, (a, b) in cmp.config_diff.items())
    cats = metric_rows([(r["category"], r) for r in cmp.category_deltas.to_dict("records")],
                       ("a", "b", "delta"))
    return (f"<b>A</b> {html.escape(cmp.a.label)} vs <b>B</b> {html.escape(cmp.b.label)}"
            f"<ul>{diff or '<li>same config</li>'}</ul>" + compared_html(cmp)
            + "<p>time per category per profiled step and rank (ms)</p>" + cats)


def verdict_html(cmp) -> str:
    """The verdict sentence (analysis/verdict.py), coloured only when resolved: the line the
    panel, a notebook cell, the report and the CLI all print."""
    v = cmp.verdict
    colour = {True: GOOD, False: BAD}.get(v.good, "#444")
    return (f"<p class='nbtools-verdict'><b>verdict ({html.escape(v.metric)}, B over A, 95 % "
            f"interval)</b>: <span style='color:{colour}'>{html.escape(v.text)}</span></p>")


def compared_html(cmp) -> str:
    """The verdict, then the compared metrics of an A/B pair (``cmp.table``), each run's number
    as analysis.metrics.combine makes it (under lab.ab each side's geometric mean over the
    rounds, so ratio = b / a), a change
    coloured only where its interval excludes no change: what the panel, a notebook cell and
    the report show."""
    t = cmp.table
    if not len(t):
        return verdict_html(cmp)
    n = f"{cmp.rounds} round" + ("s" if cmp.rounds != 1 else "")
    over = (f"a and b: each side's geometric mean over {n} of its runs' "
            "numbers (counts: the most any of its runs had; ratio = b / a, its interval from "
            "the rounds' own B/A)" if cmp.runs_a is not None else "each run's number")
    return (verdict_html(cmp)
            + f"<p>{over} per metric, its ranks combined as the metric defines (hover a "
            "metric for its meaning and how); a change is coloured only when resolved (its "
            "95 % interval excludes no change)</p>"
            + metric_rows([(r["metric"], r) for r in t.to_dict("records")],
                          ("a", "b", "delta", "ratio", "interval")))


class StaticPanel:
    """What ``lab.panel(cfg)`` shows in an export (NBTOOLS_STATIC): no widgets to drive, so
    the run the live panel would open with (ui/preset.py: the newest run of ``cfg`` and
    ``workload``, or none yet; not preset, the newest run) as its summary and timeline,
    with the config the reader would start from."""

    def __init__(self, lab, cfg=None, workload=None):
        from nbtools.ui.preset import not_run_yet, opening_run, preset_config
        preset = cfg is not None or workload is not None
        self.cfg = cfg = preset_config(cfg, workload)
        self.run = opening_run(lab.history, cfg, workload, preset)
        self.empty = not_run_yet(cfg) if preset else "no run yet"

    def _repr_html_(self) -> str:
        e = html.escape
        head = ("<div class='nbtools-static-panel' style='border:1px solid #ccc;padding:6px'>"
                "<b>lab.panel()</b> — a static copy: re-run the notebook in Jupyter to toggle"
                + (f" (preset: <code>{e(self.cfg.label())}</code>)" if self.cfg else "")
                + "<br>")
        if self.run is None:
            return head + f"<i>{e(self.empty)}</i></div>"
        figure = self.run.plot()._repr_mimebundle_().get("text/html", "")
        return head + summary_html(self.run) + figure + "</div>"
