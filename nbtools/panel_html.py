"""The HTML the panel shows: a run's summary table, an A/B comparison and the error box
text. Plain strings from Runs, comparisons and exceptions: no widgets involved.
"""
from __future__ import annotations

import html
import os
import re

from .cluster import RunTimeout
from .torch_trace import link_html

SUMMARY_COLUMNS = ("rank", "step_ms", "p10_ms", "p90_ms", "profiler_overhead_pct", "compile_s",
                   "compiles", "recompiles", "graph_breaks", "graphs", "gpu_busy_pct",
                   "compute_ms", "comm_ms", "exposed_comm_ms", "overlap_pct",
                   "graph_coverage_pct", "peak_mem_mb", "items_per_s", "cache",
                   "compile_state", "wait_ms", "last_pct")


def describe_error(err) -> str:
    """The error box text: the kind, the message (it names the root-cause rank), and each
    rank's first error line for a failed run."""
    e = html.escape
    text = f"<b>{type(err).__name__}</b>: {e(str(err))}"
    run = getattr(err, "run", None)
    if isinstance(err, RunTimeout):
        text += "\n→ press 'Restart engines' (the history is kept)"
    if run is not None and run.errors:
        text += "".join(f"\nrank {r}: {e(msg.splitlines()[0] if msg else '')}"
                        for r, msg in sorted(run.errors.items()))
        # the traceback of the rank the message blames (the root cause, not a peer's abort)
        m = re.search(r"rank (\d+):", str(err))
        r0 = int(m.group(1)) if m and int(m.group(1)) in run.errors else min(run.errors)
        text += f"<details><summary>rank {r0} traceback</summary>{e(run.errors[r0])}</details>"
    return text


def summary_html(run) -> str:
    s = run.summary
    notes = sorted({n for rep in run.ranks.values() for n in (rep or {}).get("notes") or ()})
    head = (f"<b>{html.escape(run.label)}</b> · {run.world_size} ranks · {len(run.events):,} "
            f"events · {len(run.compile_events):,} compile events"
            + (f" · {html.escape('; '.join(notes))}" if notes else "")
            + link_html(run, base=os.getcwd(), jupyter=True))
    if not len(s):
        return head
    cols = [c for c in SUMMARY_COLUMNS if c in s.columns]
    return (head + "<div style='overflow-x:auto'>"     # wider than a narrow notebook
            + s[cols].to_html(index=False, float_format=lambda x: f"{x:.4g}", na_rep="—")
            + "</div>")


def comparison_html(cmp) -> str:
    diff = "".join(f"<li><code>{html.escape(k)}</code>: {html.escape(repr(a))} → "
                   f"{html.escape(repr(b))}</li>" for k, (a, b) in cmp.config_diff.items())
    fmt = dict(index=False, float_format=lambda x: f"{x:.4g}", na_rep="—")
    return (f"<b>A</b> {html.escape(cmp.a.label)} vs <b>B</b> {html.escape(cmp.b.label)}"
            f"<ul>{diff or '<li>same config</li>'}</ul>"
            "<p>worst rank per metric</p>" + cmp.table.to_html(**fmt)
            + "<p>time per category per profiled step and rank (ms)</p>"
            + cmp.category_deltas.to_html(**fmt))
