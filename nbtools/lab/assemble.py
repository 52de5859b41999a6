"""The ranks' reports of one run -> a Run: their tables joined, the summary and its flags;
``keep``: that Run in the lab's history."""
from __future__ import annotations

import pandas as pd

from nbtools.analysis import flags, machine
from nbtools.analysis import samples as signal_samples
from nbtools.analysis import summary as summ
from nbtools.schema import tables
from nbtools.analysis.compile_counts import divergence
from nbtools.common.text import valid_texts
from nbtools.results.run import Run
from nbtools.trace.details import DETAIL_COLUMNS
from nbtools.results.torch_trace import missing_logs_flags

def keep(lab, fn, cfg, run_id, t0, reports, unfinished) -> Run:
    """A finished run as lab.run keeps it (Ctrl-C is held around this, so all or none of it
    happens): the lab marked for what the next run repairs first (ranks that did not finish
    or failed), the Run assembled, its once-per-lab flags, its workload's name, added to the
    history and saved."""
    lab._replace |= set(unfinished)
    lab._pg_broken |= bool(unfinished) or any(r.get("status") != "ok" for r in reports.values())
    run = assemble(lab, cfg, run_id, t0, reports, unfinished)
    run.flags = machine.once_per_lab(run.flags, lab.said_once)
    run.env["workload"] = getattr(fn, "name", None) or getattr(fn, "__name__", None)
    lab._pg_broken |= not run.ok
    lab.history.add(run)
    return run


def assemble(lab, cfg, run_id, t0, reports, unfinished) -> Run:
    """One Run from every rank's report: the tables concatenated, failed and unfinished ranks'
    errors, the summary, flags and environment."""
    # what the ranks send is the user's text too (ctx.report values, notes, errors): a lone
    # surrogate in it made the reports table, and then the save, fail, losing the run
    # (the tables' names are made valid where they are built, and are large: not walked)
    reports = {r: {k: v if k in ("events", "steps", "compile", "signals") else valid_texts(v)
                   for k, v in rep.items()} for r, rep in reports.items()}
    ok = {r: rep for r, rep in reports.items() if rep.get("status") == "ok"}
    steps = tables.concat([tables.from_wire(tables.STEP_COLUMNS, rep["steps"])
                           for rep in ok.values() if "steps" in rep], tables.STEP_COLUMNS)
    events = tables.concat([tables.from_wire(tables.EVENT_COLUMNS, rep["events"])
                            for rep in ok.values() if "events" in rep], tables.EVENT_COLUMNS)
    comp = tables.concat([tables.from_wire(tables.COMPILE_COLUMNS, rep["compile"]["columns"])
                          for rep in ok.values() if rep.get("compile")], tables.COMPILE_COLUMNS)
    errors = {r: rep.get("error", "") for r, rep in reports.items() if rep.get("status") != "ok"}
    for r in unfinished:
        errors[r] = f"did not finish within the run timeout (engine {lab.rank_to_engine[r]})"
    sm = summ.build(steps, events, comp, ok, cfg) if ok else None
    div = divergence({r: rep["compile"].get("counts", {}) for r, rep in ok.items()
                      if rep.get("compile")}) if len(ok) > 1 else None
    env = dict(next(iter(ok.values()))["env"]) if ok else {}
    env.update(world_size=lab.world_size, hosts=sorted({p.host for p in lab.placements}))
    ranks = {r: {k: rep.get(k) for k in ("check", "notes", "reused", "compile_outcome",
                                         "model_built_at", "built_by",
                                         "peak_mem_mb", "shapes", "engine_s", "parse_s",
                                         "last_value", "unused", "warnings",
                                         "step_items", "machine", "graph_pool_mb",
                                         "preload", "train", "own_step", "batch_size",
                                         "profile_lost")}
             for r, rep in reports.items()}
    for p in lab.placements:    # where each rank ran: the timeline's per-host lanes
        ranks.setdefault(p.rank, {})["host"] = p.host
    rows = pd.DataFrame([row for r in sorted(ok) for row in ok[r].get("reports") or []])
    run = Run(config=cfg, steps=steps, events=events, compile_events=comp, env=env,
              status="ok" if not errors else "failed", errors=errors, ranks=ranks,
              run_id=run_id, started=t0, reports=rows,
              torch_trace_logs={r: rep["torch_trace"] for r, rep in reports.items()
                                if rep.get("torch_trace")})
    mem = [pd.DataFrame(rep["memory"]) for rep in ok.values() if rep.get("memory") is not None]
    run.memory = pd.concat(mem, ignore_index=True) if mem else pd.DataFrame()
    # every rank's signals, a failed rank's too: what its machine did until it stopped
    run.samples = signal_samples.table(reports)
    run.event_details = tables.concat([tables.from_wire(DETAIL_COLUMNS, rep["event_details"])
                                       for rep in ok.values() if rep.get("event_details")],
                                      DETAIL_COLUMNS)
    if sm is not None:
        run.summary = sm
        run.flags = summ.flags(sm, ok, cfg, div, events, comp, steps)
    if cfg.torch_trace:
        run.flags += missing_logs_flags(ok, run.torch_trace_logs)
    lost = {r: rep["profile_lost"] for r, rep in sorted(ok.items()) if rep.get("profile_lost")}
    if lost:
        run.flags.append(flags.make("profile-lost", ranks=", ".join(map(str, lost)),
                                    error=next(iter(lost.values()))))
    return run

