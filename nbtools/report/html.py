"""One self-contained HTML file of findings: notes, environment, configs, summaries,
timelines, compile events and A/B comparisons.

The file must open offline and be safe to mail around: BokehJS is inlined once for every
figure, the user's notes are Markdown with raw HTML escaped, only whitelisted environment
keys are written, and home directories are shortened to ``~/`` everywhere (event names and
compile frames included, since the figures' data is part of the page).
"""
from __future__ import annotations

import dataclasses
import html
import re
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from nbtools.analysis.compile_counts import wall_s
from nbtools.common.units import fmt_number
from nbtools.common.atomic import write_file
from nbtools.common.outputs import mark_html, output_refusal
from nbtools.common.privacy import scrub_home
from nbtools.common.text import valid_text
from nbtools.config.step_config import StepConfig
from nbtools.results.comparison import Comparison
from nbtools.results.exploration import Exploration
from nbtools.results.run import Run
from nbtools.ui.html import compared_html, errors_html, flags_html
from nbtools.ui.summary_view import summary_table
from nbtools.results.torch_trace import link_html

# Everything else in run.env (connection files, keys, user names, environment dumps) stays out.
ENV_KEYS = ("torch", "torch_version", "cuda", "cuda_version", "nccl", "nccl_version", "cudnn",
            "triton", "python", "platform", "driver", "gpus", "gpu", "devices", "device",
            "device_name", "world_size", "hosts", "host", "backend", "nbtools",
            "workload")   # the Workload's name: the run's title (Run.title)
KIND_ORDER = ("recompile", "graph_break", "cudagraph_skip", "limit_hit", "compile",
              "backward_compile", "cudagraph_record")
MAX_COMPILE_ROWS = 200
# key/token/password = <8+ chars>: connection-file keys are UUIDs; "dict key: x" stays
_SECRET = re.compile(r"(?i)\b(key|signature|password|passwd|token|secret)(['\"]?\s*[:=]\s*['\"]?)"
                     r"[\w\-.+/=]{8,}")
CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;color:#222}
main{max-width:1180px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:24px;margin:8px 0}h2{font-size:19px;margin-top:36px;border-bottom:1px solid #ddd}
h3{font-size:16px;margin-top:22px}
table.tbl{border-collapse:collapse;font-size:12px;margin:8px 0}
.tbl th,.tbl td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
.tbl th{background:#f4f4f4}.tbl tr.diff td,.tbl tr.diff th{background:#fff3cd}
.flag{color:#a40000}.muted{color:#666;font-size:12px}.notes{background:#fafafa;padding:4px 14px;
border-left:3px solid #ccc}pre{white-space:pre-wrap;font-size:12px;background:#f7f7f7;padding:6px}
"""
_TEMPLATE = """{% from macros import embed %}
{% block postamble %}<style>{{ css }}</style>{% endblock %}
{% block contents %}<main>
{% for kind, value in parts %}
{% if kind == "html" %}{{ value }}{% else %}{{ embed(roots[value]) }}{% endif %}
{% endfor %}</main>{% endblock %}
"""


def export_html(path, runs, notes: str = "", title: str = "torch-nbtools findings",
                comparisons=(), *, width: int | None = None, backend: str = "canvas",
                explorations=(), force: bool = False) -> Path:
    """Write one offline HTML file for ``runs`` (a Run, a list, or any iterable of Runs,
    such as ``lab.history``) and ``comparisons``: (run_a, run_b) pairs or Comparisons
    (``lab.ab(...)``: its verdict over rounds with its interval). ``explorations``: an
    Exploration or several (``lab.explore(...)``): each one's table of A/Bs, its verdict
    and the winner's code.

    The page carries nbtools' mark, so a later export may replace it; any other existing
    file (a README, a notebook, a trace) is refused before any work with a FileExistsError
    naming it, unless ``force=True``. The file is written whole or not at all: a full disk
    leaves what was there before and raises an OSError naming the file
    (nbtools.common.atomic.WriteFailed)."""
    from nbtools.ui.exploration import exploration_html
    from nbtools.ui.timeline import Timeline, compare_figure

    why = output_refusal(path, "force=True", force=force, parents=True)
    if why:
        raise FileExistsError(why)
    runs, title = _as_runs(runs), scrub(title)
    clean = {id(r): scrubbed(r) for r in runs}
    by_id = {r.run_id: r for r in runs}
    pairs = [p if isinstance(p, Comparison) else
             Comparison(*(by_id[x] if isinstance(x, str) else x for x in p)) for p in comparisons]
    for r in (x for p in pairs for x in (p.a, p.b)):
        clean.setdefault(id(r), scrubbed(r))

    parts: list = [("html", f"<h1>{_e(title)}</h1><p class='muted'>{len(runs)} run(s) · "
                    f"written {time.strftime('%Y-%m-%d %H:%M')} by torch-nbtools</p>")]
    if notes:
        parts.append(("html", f"<div class='notes'>{render_markdown(scrub(notes))}</div>"))
    parts.append(("html", "<h2>Environment</h2>" + _env_table(runs)))
    parts.append(("html", "<h2>Runs</h2><p class='muted'>Highlighted rows differ between runs."
                  "</p>" + _config_table(runs)))
    roots = []
    for i, run in enumerate(runs):
        c = clean[id(run)]
        parts.append(("html", _run_header(c)))
        # tlparse's report of the run's TORCH_TRACE logs, linked from where the page is
        parts.append(("html", link_html(run, base=Path(path).expanduser().resolve().parent)))
        if len(c.events) or len(c.compile_events) or len(c.steps):
            tl = Timeline(c, width=width, backend=backend, live=False)
            tl.layout.name = f"timeline-{i}"
            roots.append(tl.layout)
            parts.append(("html", f"<h3>Timeline</h3><p class='muted'>{_lod_note(tl.stats)}</p>"))
            parts.append(("root", tl.layout.name))
        parts.append(("html", "<h3>Compile events</h3>" + _compile_table(c)))
    if pairs:
        parts.append(("html", "<h2>A/B comparisons</h2>"))
    for j, cmp in enumerate(pairs):
        ca, cb = clean[id(cmp.a)], clean[id(cmp.b)]
        drawn = bool(len(ca.events) or len(cb.events))
        parts.append(("html", _compare_header(dataclasses.replace(cmp, a=ca, b=cb), drawn)))
        if not drawn:
            continue
        lay = compare_figure(ca, cb, width=width, backend=backend, live=False)
        lay.name = f"compare-{j}"
        roots.append(lay)
        parts.append(("root", lay.name))

    explorations = [explorations] if isinstance(explorations, Exploration) else \
        list(explorations or ())
    if explorations:
        parts.append(("html", "<h2>Explorations</h2>"))
    for ex in explorations:
        if not isinstance(ex, Exploration):
            raise TypeError(f"export_html(explorations=...) needs Explorations (lab.explore's "
                            f"result); got {type(ex).__name__}")
        parts.append(("html", scrub(exploration_html(ex))))

    page = mark_html(_page(title, parts, roots), "export_html")
    return write_file(path, page, errors="replace", parents=True)  # "replace": text scrub() missed


def _as_runs(runs) -> list:
    if isinstance(runs, Run):
        return [runs]
    if isinstance(runs, Mapping):
        runs = runs.values()
    out = list(runs)
    bad = [type(r).__name__ for r in out if not isinstance(r, Run)]
    if bad:
        raise TypeError(f"export_html needs Runs; got {', '.join(sorted(set(bad)))}")
    return out


def _page(title, parts, roots) -> str:
    if roots:
        from nbtools.report.page import bokeh_page
        # One document for every figure, BokehJS once, both packed (report/page.py)
        return bokeh_page(roots, title, _TEMPLATE, dict(parts=parts, css=CSS))
    body = "".join(v for _, v in parts)
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}"
            f"</title><style>{CSS}</style></head><body><main>{body}</main></body></html>")


# -- privacy ---------------------------------------------------------------------------
def scrub(text) -> str:
    """Home directories -> ~, and anything shaped like key=value secrets -> <redacted>."""
    text = scrub_home(valid_text(str(text)))   # a lone surrogate: '?', not a failed export
    return _SECRET.sub(r"\1\2<redacted>", text)


def safe_env(env: dict) -> dict:
    """The environment's reportable keys, formatted, with private paths and names scrubbed."""
    # a key recorded as None (a built-in scenario has no Workload name) is not recorded:
    # "workload None None None None" said nothing
    return {k: scrub(_fmt_value(env[k])) for k in ENV_KEYS if env.get(k) is not None}


def scrubbed(run: Run) -> Run:
    """A copy whose strings are safe to publish; tables share their numeric columns."""
    return dataclasses.replace(
        run, events=_scrub_cats(run.events, ("name", "lane")),
        compile_events=_scrub_cats(run.compile_events, ("name", "frame", "reason")),
        env=safe_env(run.env), flags=[scrub(f) for f in run.flags],
        errors={k: scrub(v) for k, v in run.errors.items()}, ranks={})


def _scrub_cats(df: pd.DataFrame, cols) -> pd.DataFrame:
    if not len(df):
        return df
    new = {}
    for col in cols:
        cat = pd.Categorical(df[col])
        names = [scrub(c) for c in cat.categories]    # per distinct string, not per row
        if len(set(names)) == len(names):
            new[col] = cat.rename_categories(names)
        else:   # two paths became one: rebuild from the scrubbed values
            new[col] = pd.Categorical(np.asarray(names, object)[cat.codes])
    return df.assign(**new)


# -- sections --------------------------------------------------------------------------
def render_markdown(text: str) -> str:
    """Notes (CommonMark with tables) as HTML; raw HTML in them is shown as text, never run."""
    from markdown_it import MarkdownIt
    # html=False: raw HTML in the notes is shown as text, never run
    return MarkdownIt("commonmark", {"html": False}).enable("table").render(text)


def _run_header(run: Run) -> str:
    out = [f"<h2 id='run-{_e(run.run_id)}'>Run #{_e(run.run_id)} · "
           f"{_e(run.title)}</h2>",
           f"<p class='muted'>status {_e(run.status)} · source {_e(run.source)} · "
           f"world size {run.world_size} · started "
           f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(run.started))} · "
           f"{len(run.events):,} events · {len(run.compile_events):,} compile events</p>"]
    out.append(scrub(flags_html(run.flags) + errors_html(run, lines=8)))
    if len(run.summary):
        out.append("<h3>Summary</h3>" + scrub(summary_table(run.summary)))
        # the reading a colleague starts from: the waits, the host's split, the kernels
        out.append("<h3>Why the step takes its time</h3>" + scrub(run.why()._repr_html_()))
    return "".join(out)


def _compile_table(run: Run) -> str:
    ce = run.compile_events
    if not len(ce):
        return "<p class='muted'>No compile events (eager, or nothing recorded).</p>"
    all_ranks = sorted(set(run.steps["rank"].tolist()) | set(run.events["rank"].tolist())
                       | set(ce["rank"].tolist()))
    df = ce.assign(**{c: ce[c].astype(str) for c in ("kind", "name", "frame", "reason")})
    rows = []
    for (kind, name, frame, reason), g in df.groupby(["kind", "name", "frame", "reason"],
                                                      sort=False):
        ranks = sorted(set(g["rank"].tolist()))
        rows.append((KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER), kind,
                     name, frame, reason, ranks, len(g),
                     max(wall_s(rg) for _, rg in g.groupby("rank"))))
    rows.sort(key=lambda r: (r[0], r[1]))
    body = []
    for _, kind, name, frame, reason, ranks, n, secs in rows[:MAX_COMPILE_ROWS]:
        divergent = ranks != all_ranks and len(all_ranks) > 1
        where = ("<span class='flag'>divergent: only rank(s) " + ", ".join(map(str, ranks))
                 + "</span>") if divergent else "all ranks" if len(all_ranks) > 1 else str(ranks[0])
        body.append(f"<tr class='{'diff' if divergent else ''}'><td>{_e(kind)}</td><td>{_e(name)}"
                    f"</td><td>{_e(frame)}</td><td>{_e(reason)}</td><td>{where}</td>"
                    f"<td>{n}</td><td>{fmt_number(secs)}</td></tr>")
    more = len(rows) - MAX_COMPILE_ROWS
    return ("<table class='tbl'><tr><th>kind</th><th>function</th><th>frame</th><th>reason</th>"
            "<th>ranks</th><th>events</th><th title='wall seconds of the slowest rank (the ranks "
            "compile side by side), not a sum over ranks'>seconds (slowest rank)</th></tr>" + "".join(body) + "</table>"
            + (f"<p class='muted'>{more} more rows not shown.</p>" if more > 0 else ""))


def _matrix(runs, rows) -> str:
    """Rows of (label, one value per run); rows whose values differ are highlighted."""
    head = "".join(f"<th>#{_e(r.run_id)}</th>" for r in runs)
    body = []
    for label, values in rows:
        cls = " class='diff'" if len(set(map(str, values))) > 1 else ""
        body.append(f"<tr{cls}><th>{_e(label)}</th>" + "".join(f"<td>{_e(v)}</td>" for v in values)
                    + "</tr>")
    return f"<table class='tbl'><tr><th></th>{head}</tr>{''.join(body)}</table>"


def _env_table(runs) -> str:
    envs = [safe_env(r.env) for r in runs]
    keys = [k for k in ENV_KEYS if any(k in e for e in envs)]
    if not keys:
        return "<p class='muted'>No environment recorded.</p>"
    # an empty value (a CPU-only trace's devices: []) reads as not recorded, not as blank
    return _matrix(runs, [(k, [e.get(k) or "—" for e in envs]) for k in keys])


def _config_table(runs) -> str:
    fields = [f.name for f in dataclasses.fields(StepConfig)]
    rows = [("label", [r.label for r in runs]), ("status", [r.status for r in runs]),
            ("world size", [r.world_size for r in runs])]
    if any(r.source != "lab" for r in runs):      # traces from a person's own job beside
        rows.append(("source", [r.source for r in runs]))
    # None is the scenario's own value: the word the panel and the CLI use for it;
    # traces from a person's own job have no StepConfig: no rows of dashes for them
    if any(r.config for r in runs):
        rows += [(f, [("default" if getattr(r.config, f) is None else getattr(r.config, f))
                      if r.config else "—" for r in runs]) for f in fields]
    return _matrix(runs, rows)


def _compare_header(cmp: Comparison, drawn: bool = True) -> str:
    a, b = cmp.a, cmp.b
    rounds = f" · {cmp.rounds} round{'s' if cmp.rounds != 1 else ''} of A B B A, the runs nearest each side's median shown" \
        if cmp.runs_a is not None else ""
    out = [f"<h3>A #{_e(a.run_id)} vs B #{_e(b.run_id)}{rounds}</h3>"]
    if a.config is not None and b.config is not None:
        diff = a.config.diff(b.config)
        out.append("<p>Config: " + (", ".join(f"<b>{_e(k)}</b> {_e(va)} → {_e(vb)}"
                                               for k, (va, vb) in diff.items()) or "identical")
                   + "</p>")
    out.append(compared_html(cmp))     # the panel's verdict, numbers and table
    out.append("<p class='muted'>Timelines aligned at each run's first profiled step; events "
               "narrower than a pixel are merged as in each run's own timeline.</p>" if drawn
               else "<p class='muted nbtools-no-timelines'>No timelines: neither run was "
               "profiled (profiled=0, or a run whose trace held no events), so there is "
               "nothing to draw; the numbers above come from their timed steps.</p>")
    return "".join(out)


def _lod_note(stats: dict) -> str:
    if not stats.get("merged_boxes"):
        return f"{stats.get('events', 0):,} events, each drawn as its own box."
    return (f"{stats['events']:,} events drawn as {stats['boxes']:,} boxes: "
            f"{stats['merged_events']:,} events narrower than one pixel "
            f"({fmt_number(stats['pixel_ns'] / 1e3)} µs at this width) were merged into "
            f"{stats['merged_boxes']:,} boxes, per lane and pixel column (the hover says "
            "'N merged'; a box's opacity is how busy its span was). Zoom in the notebook "
            "for full detail.")


# -- formatting --------------------------------------------------------------------------
def _fmt_value(v) -> str:
    if isinstance(v, (list, tuple)):
        counts = Counter(map(str, v))
        return ", ".join(f"{n} × {k}" if n > 1 else k for k, n in counts.items())
    if isinstance(v, Mapping):
        return ", ".join(f"{k}: {x}" for k, x in v.items())
    return str(v)


def _e(s) -> str:
    return html.escape(scrub(s))
