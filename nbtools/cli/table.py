"""The command line's run table (`run`, `demo`, `view`): per run its label, then a row per
rank and the run's own row, about 100 characters wide; and the legend under it."""
from __future__ import annotations

from nbtools.common.units import fmt_column, fmt_ratio


def _legend(traces: bool = False) -> str:
    """Every header of format_table, explained from the registry the panel and the report
    read too (analysis/metrics.py), with how its "all" row combines the ranks."""
    from nbtools.analysis.metrics import CLI, METRICS, TRACE_CLI, explain, how
    lines = [(f"{METRICS[c].short} = " if METRICS[c].short else "") + explain(c)
             + f"; rank all: {how(c)}" for c in (TRACE_CLI if traces else CLI)]
    return "\n".join(["columns:"] + [f"  {line}" for line in lines]
                     + ["  rank all = the run: its ranks combined as the panel, the report and "
                        "table() combine them",
                        "  - = not in these traces (e.g. graph% on CPU ranks)" if traces else
                        "  - = not measured in this run (e.g. profiled=0, or on CPU ranks)"])


TABLE_LEGEND = _legend()
TRACE_LEGEND = _legend(traces=True)


def format_table(runs, header: bool = True) -> str:
    """Per run: its label on a line of its own (never cut), then one row per rank and, for
    a run of several ranks, the run's own row (rank "all": metrics.combine, the numbers the
    panel and the report show): median and p10/p90 step ms, throughput, compile s,
    recompiles, busy and overlap shares, memory. About 100 characters wide. Runs read from
    a person's own traces (no StepConfig: nothing timed their steps) get the profiled step
    and its parts instead (metrics.TRACE_CLI)."""
    from nbtools.analysis.metrics import CLI, METRICS, TRACE_CLI, combine
    runs = list(runs)
    shown = TRACE_CLI if runs and all(r.config is None for r in runs) else CLI
    cols = [(c, max(len(METRICS[c].label) + 1, 7)) for c in shown]
    head = f"{'rank':>6} " + " ".join(f"{METRICS[c].label:>{w}}" for c, w in cols) + "  status"
    lines = [head, "-" * len(head)] if header else []

    def line(rank, values, end: str) -> str:      # values None: a failed run's blanks
        return (f"{rank:>6} " + " ".join(
            f"{'' if values is None else _number(c, values.get(c)):>{w}}" for c, w in cols)
            + f"  {end}")

    for run in runs:
        lines.append(_run_head(run) if run.config else _trace_head(run))
        s = run.summary
        if not len(s):   # the reason is the row: a bare "failed:" said nothing
            lines.append(line("-", None, "failed: " + ("; ".join(
                f"rank {r}: {(e.splitlines() or [''])[0][:80]}"
                for r, e in sorted(run.errors.items())) or "no rank reported a result")))
        for row in s.to_dict("records"):
            lines.append(line(str(int(row["rank"])), row, run.status))
        if len(s) > 1:
            lines.append(line("all", {c: combine(s, c, run.config) for c in shown},
                              run.status))
        for f in run.flags:
            lines.append(f"    ! {f}")
    return "\n".join(lines)


def format_comparison(cmp) -> str:
    """B against A on the trace table's columns (A, B, B - A, B / A) and the verdict on the
    first (the profiled step's window), in the words every surface prints."""
    from nbtools.analysis.metrics import METRICS, TRACE_CLI
    t = cmp.table.set_index("metric")
    rows = [m for m in TRACE_CLI if m in t.index]
    w = max(len(METRICS[m].label) for m in rows) if rows else 6
    lines = [f"B against A, per profiled step:",
             f"  {'':<{w}} {'A':>10} {'B':>10} {'B - A':>10} {'B / A':>7}"]
    for m in rows:
        r = t.loc[m]
        ratio = fmt_ratio(r["ratio"], none="-")
        lines.append(f"  {METRICS[m].label:<{w}} {_number(m, r['a']):>10} {_number(m, r['b']):>10}"
                     f" {_number(m, r['delta']):>10} {ratio:>7}")
    v = cmp.verdict
    lines.append(f"verdict ({METRICS[v.metric].label}): {v.text}")
    return "\n".join(lines)


def _run_head(run) -> str:
    """A lab run: its config's label, then its id and start time, so the runs of one config
    (rounds, a config run again) each have a name (``History[id]``, `view` lists them)."""
    import math
    import time
    t = run.started
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t and math.isfinite(t) \
        else "start time unknown"
    return f"{run.title}  (#{run.run_id}, {when})"


def _trace_head(run) -> str:
    """A run read from traces: its id and which file each rank came from."""
    files = [f"rank {r}: {info['file']}" for r, info in sorted(run.ranks.items())
             if isinstance(info, dict) and info.get("file")]
    return f"{run.run_id} {run.source}" + (f" ({', '.join(files)})" if files else "")


def _number(column: str, value) -> str:
    """A table cell: the unit's fixed digits (common/units.py), so the rows line up."""
    from nbtools.analysis.metrics import unit
    return fmt_column(value, unit(column))
