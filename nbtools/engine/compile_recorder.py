"""Engine side: what torch.compile did during one run (compiles, recompiles with every guard
failure, the lazy backward compiles AOTAutograd does at a graph's first backward, graph breaks at the user's file:line, the recompile limit, cudagraph-tree records,
re-records and skips), as one COMPILE_COLUMNS table per rank plus a few counts.

Sources, all in-process and structured (no stderr parsing):

- ``torch._dynamo.utils.get_compilation_metrics()``: a record per compiled frame (times, op
  and guard counts, cache hits), read at finish_run (records land after Dynamo's end callback).
- Artifact loggers, with our own logging.Handler: ``torch._dynamo.guards.__recompiles`` has
  every guard failure (CompilationMetrics.recompile_reason only the first), ``*.__graph_breaks``
  the user's file:line, ``torch._inductor.cudagraph_{trees,utils}.__cudagraphs`` recordings
  and skips. set_logs is a no-op under TORCH_LOGS, so we set levels on the loggers and enable
  the recompiles artifact in ``torch._logging._internal.log_state`` ourselves, and stop those
  loggers propagating: our handler forwards a record to torch's stderr handler only where
  torch would have printed it anyway (the user's TORCH_LOGS / set_logs, default warnings).
- ``torch._dynamo.callback.callback_handler`` (CUDAGRAPH_RECORDING: how long a recording
  took). torch._dynamo.reset() clears these callbacks and set_logs resets logger levels:
  call install() after either (start_run does).
- ``counters``: fallback for graph breaks (2.13 counts some only under 'unimplemented') and
  cudagraph skips, and the number of graphs.

Internals verified in torch 2.13.0+cpu (source and runs) and 2.11.0+cu130 (runs on H200,
cudagraph trees included); every access is guarded so a missing one loses detail, not the
run. Importing this module does not import torch (``divergence`` is for the client).

The guarded reads of torch internals and the parsing of its messages are in
compile_records.py; a rank's counts and the divergence between ranks in compile_summary.py.
"""
from __future__ import annotations

import bisect
import logging
import re
import time

from nbtools.engine.dynamo_records import (FrameHits, cache_counts, cached_graphs, callback_trigger,
                              compilation_metrics, compile_times, counter_snapshot,
                              current_compile_id, fold_backward, frame_of, log_state,
                              parse_reasons, shorten, user_frame)
from nbtools.analysis.compile_counts import divergence, rank_counts  # divergence: re-exported (tests, users)
from nbtools.engine.explain import explain  # noqa: F401  (torch-free at import)
from nbtools.engine.torch_trace import torch_trace_dir  # noqa: F401
from nbtools.schema import tables

__all__ = ["CompileRecorder", "divergence", "explain", "torch_trace_dir"]

_RECOMPILES = ("torch._dynamo.guards.__recompiles", "torch._dynamo.guards.__recompiles_verbose")
_GRAPH_BREAKS = ("torch._dynamo.symbolic_convert.__graph_breaks",
                 "torch._dynamo.convert_frame.__graph_breaks", "torch._dynamo.exc.__graph_breaks")
_CG_TREES = "torch._inductor.cudagraph_trees.__cudagraphs"   # (Re-)recording: debug level
_CG_UTILS = "torch._inductor.cudagraph_utils.__cudagraphs"   # skips: warning level
_DEBUG_LOGGERS = _RECOMPILES + _GRAPH_BREAKS + (_CG_TREES,)  # we set these to DEBUG
_LOGGERS = _DEBUG_LOGGERS + (_CG_UTILS,)
_LIMIT_LOGGER = "torch._dynamo.convert_frame"   # warning "torch._dynamo hit config.X (N)"

_FUNC_INFO = re.compile(r"'(.*)' \((.*)\)")
# "[0/1] Recording function=partition_0, [mode=..., ]cuda_graph_id=3, inputs: ..." and
# "[0/1] Re-recording function=..., [mode=..., ]reason=..." (mode= is 2.13 only)
_CG_RECORD = re.compile(r"^\[([^\]]*)\] (Re-)?[Rr]ecording function=([^,]+)(?:.*?reason=(.*))?",
                        re.S)
_SIZES = re.compile(r"size=\[([^\]]*)\]")
_ROW = dict(kind="", name="", frame="", reason="", compile_id="", ts_ns=0, dur_ns=0, graphs=0,
            ops=0, guards=0, cache="")


class CompileRecorder:
    """Collects compile events for one run at a time. See the module docstring."""

    def __init__(self):
        self._handler = _Handler(self)
        self._mine = (None, set())   # (log_state object, artifacts we enabled in it)
        self._threshold = {}         # logger name -> level from which torch would print
        self._hits = FrameHits()     # entries into compiled frames during the run
        self._active = False
        self._reset_buffers()

    # -- engine API ------------------------------------------------------------------
    def install(self) -> None:
        """(Re)register hooks. Idempotent; call after torch.compiler.reset() / set_logs."""
        import torch._dynamo  # noqa: F401  (registers the artifact loggers)
        try:
            from torch._dynamo.callback import callback_handler
            if self._on_start not in callback_handler.start_callbacks:
                callback_handler.register_start_callback(self._on_start)
            if self._on_end not in callback_handler.end_callbacks:
                callback_handler.register_end_callback(self._on_end)
        except (ImportError, AttributeError):  # private API: only recording times are lost
            pass
        from torch._dynamo import utils as dutils
        deque = getattr(dutils, "_compilation_metrics", None)
        if deque is not None and (deque.maxlen or 0) < 1024 and \
                hasattr(dutils, "set_compilation_metrics_limit"):
            dutils.set_compilation_metrics_limit(1024)  # default 64: a long run would lose some
        state = log_state()
        user = set(getattr(state, "artifact_names", ())) - (
            self._mine[1] if self._mine[0] is state else set())
        if state is not None and not {"recompiles", "recompiles_verbose"} & user:
            state.enable_artifact("recompiles")   # the message is only built when enabled
            self._mine = (state, {"recompiles"})
        for name in _LOGGERS:
            log = logging.getLogger(name)
            # what torch would print without us: all of it if the user enabled the artifact,
            # else what passes the parent's level (default: warnings)
            self._threshold[name] = (logging.DEBUG if name.rsplit(".__", 1)[1] in user
                                     else log.parent.getEffectiveLevel())
            if name in _DEBUG_LOGGERS:
                log.setLevel(logging.DEBUG)
            log.propagate = False
            if self._handler not in log.handlers:
                log.addHandler(self._handler)
        limit_log = logging.getLogger(_LIMIT_LOGGER)   # left as torch set it: we only listen
        if self._handler not in limit_log.handlers:
            limit_log.addHandler(self._handler)

    def uninstall(self) -> None:
        """Remove our handlers and callbacks; loggers go back to torch's defaults."""
        try:
            from torch._dynamo.callback import callback_handler
            for lst, fn in ((callback_handler.start_callbacks, self._on_start),
                            (callback_handler.end_callbacks, self._on_end)):
                while fn in lst:
                    lst.remove(fn)
        except (ImportError, AttributeError):
            pass
        for name in _LOGGERS + (_LIMIT_LOGGER,):
            log = logging.getLogger(name)
            log.removeHandler(self._handler)
            if name in _LOGGERS:
                log.propagate = True
                if name in _DEBUG_LOGGERS and self._threshold.get(name) != logging.DEBUG:
                    log.setLevel(logging.NOTSET)
        self._hits.remove()
        state, mine = self._mine
        if state is not None and state is log_state():
            state.artifact_names.difference_update(mine)
        self._mine = (None, set())

    def start_run(self) -> None:
        """Begin collecting for one run (clears per-run buffers; re-installs)."""
        self.install()
        self._reset_buffers()
        recs = compilation_metrics()
        self._metrics_mark = recs[-1] if recs else None
        self._counters0 = counter_snapshot()
        self._hits.start()
        self._active = True

    def pause_frame_hits(self) -> bool:
        """Stop counting compiled-frame entries (a Python call each) until resume; see
        engine/quiet.py. Returns whether it was paused."""
        return self._active and self._hits.pause()

    def resume_frame_hits(self) -> None:
        """Count guard hits and misses again after a pause (the measured steps count, the
        warm-up's compiles do not)."""
        self._hits.resume()

    def set_step(self, step: int) -> None:
        """The step now executing (-1 outside steps). Events take it from their timestamp."""
        self._step_ts.append(time.time_ns())
        self._step_val.append(int(step))

    def finish_run(self, rank: int) -> dict:
        """-> {"columns": COMPILE_COLUMNS wire form, "counts": {...}} for this run."""
        self._active = False
        rows = self._metrics_rows() + self._rows
        rows += self._counter_fallback_rows(rows)
        rows.sort(key=lambda r: r["ts_ns"])
        names = {r["compile_id"]: r["name"] for r in rows if r["kind"] in ("compile", "recompile")}
        last = ""
        for r in rows:
            # a cudagraph skip is logged at the first call, outside any compile context:
            # give it the frame compiled just before
            if r["kind"] in ("compile", "recompile"):
                last = r["compile_id"]
            elif not r["compile_id"] and r["kind"].startswith("cudagraph"):
                r["compile_id"] = last
            r["name"] = r["name"] or names.get(r["compile_id"], "")
            r["step"] = self._step_at(r["ts_ns"])
        counts = rank_counts(rows, self._graphs_counted, self._errors)
        # what ran, beside what compiled: a run that compiled nothing may still have run
        # graphs compiled by an earlier run (state reused)
        counts["frames_run"], counts["frame_misses"] = self._hits.read()
        counts["graphs_cached"] = cached_graphs()
        data = {c: [r[c] for r in rows] for c in tables.COMPILE_COLUMNS if c != "rank"}
        data["rank"] = [rank] * len(rows)
        return {"columns": tables.to_wire(tables.COMPILE_COLUMNS, data), "counts": counts}

    # -- internals -------------------------------------------------------------------
    def _reset_buffers(self):
        self._rows = []              # events from logs and callbacks
        self._reasons = {}           # new compile id -> all guard-failure reasons
        self._limits = set()         # compile ids that hit a recompile limit (from the log)
        self._cg_open = {}           # compile id -> start times of recordings in progress
        self._step_ts, self._step_val = [], []
        self._metrics_mark, self._counters0 = None, {}
        self._graphs_counted = self._errors = 0

    def _step_at(self, ts_ns: int) -> int:
        i = bisect.bisect_right(self._step_ts, ts_ns) - 1
        return self._step_val[i] if i >= 0 else -1

    def _add(self, kind, ts_ns=None, **fields) -> dict:
        row = {**_ROW, **fields, "kind": kind,
               "ts_ns": time.time_ns() if ts_ns is None else ts_ns}
        self._rows.append(row)
        return row

    def _on_start(self, args):
        if self._active and callback_trigger(args) == "CUDAGRAPH_RECORDING":
            self._cg_open.setdefault(str(args.compile_id), []).append(time.time_ns())

    def _on_end(self, args):
        cid = str(getattr(args, "compile_id", ""))
        if not (self._active and callback_trigger(args) == "CUDAGRAPH_RECORDING"
                and self._cg_open.get(cid)):
            return
        t0 = self._cg_open[cid].pop()
        for r in reversed(self._rows):   # the "Recording function=" line came in between
            if r["kind"] == "cudagraph_record" and r["dur_ns"] == 0 and r["compile_id"] == cid:
                r["ts_ns"], r["dur_ns"] = t0, time.time_ns() - t0
                return
        self._add("cudagraph_record", ts_ns=t0, dur_ns=time.time_ns() - t0, compile_id=cid,
                  graphs=1)

    def _on_record(self, record: logging.LogRecord) -> None:
        name = record.name
        if name == _LIMIT_LOGGER and not str(record.msg).startswith("torch._dynamo hit config."):
            return   # the rest of convert_frame's log (plenty under TORCH_LOGS=+dynamo)
        msg, cid = record.getMessage(), current_compile_id()
        if name in _RECOMPILES:
            self._reasons.setdefault(cid, []).extend(parse_reasons(msg))
        elif name in _GRAPH_BREAKS:
            reason = msg.split("Graph Break Reason: ", 1)[1] if "Graph Break Reason: " in msg \
                else str(record.exc_info[1]) if record.exc_info and record.exc_info[1] else msg
            self._add("graph_break", frame=user_frame(msg), reason=shorten(reason), compile_id=cid)
        elif name == _CG_TREES:
            m = _CG_RECORD.search(msg)   # the text: argument order differs in 2.11 and 2.13
            if m:
                cg_id, re_, fn, why = m.groups()
                shapes = " ".join("x".join(d.split(", ")) for d in _SIZES.findall(msg))
                self._add("cudagraph_rerecord" if re_ else "cudagraph_record",
                          reason=shorten(f"{fn}: {why}" if re_ else f"{fn}: inputs {shapes}"),
                          compile_id=cg_id or cid, graphs=int(not re_))
        elif name == _CG_UTILS and record.levelno >= logging.WARNING:
            self._add("cudagraph_skip", frame=user_frame(msg), reason=shorten(msg), compile_id=cid)
        elif name == _LIMIT_LOGGER:
            a = record.args if isinstance(record.args, tuple) else ()
            m = _FUNC_INFO.match(str(a[2])) if len(a) >= 3 else None
            self._limits.add(cid)
            reasons = self._reasons.get(cid) or ([str(a[3])] if len(a) >= 4 else [])
            limit = f"{a[0]} ({a[1]})" if len(a) >= 2 else "recompile limit"
            self._add("limit_hit", name=m.group(1) if m else "", frame=m.group(2) if m else "",
                      compile_id=cid, reason=f"hit {limit}; runs eagerly from now on. "
                      f"Guard failures: {'; '.join(reasons)}")

    def _new_metrics(self) -> list:
        recs, mark = compilation_metrics(), self._metrics_mark
        if mark is not None:
            for i in range(len(recs) - 1, -1, -1):
                if recs[i] is mark:
                    return recs[i + 1:]
        return recs   # mark evicted or deque cleared: everything there is new

    def _metrics_rows(self) -> list:
        rows, by_id = [], {}
        for m in self._new_metrics():
            if getattr(m, "is_runtime", False):
                continue
            cid = str(m.compile_id or "")
            start = (m.start_time_us or 0) * 1000
            if m.co_name is None:
                # no frame: a lazy backward compile (compiled at the first backward, so
                # its own row at its own time), or a failure before tracing, like the
                # recompile limit (already a row from the log)
                if m.fail_type is None:
                    fwd = by_id.get(cid)
                    if fwd is not None:
                        fold_backward(fwd, m)
                    rows.append({**_ROW, "kind": "backward_compile", "compile_id": cid,
                                 "name": fwd["name"] if fwd else "",
                                 "frame": fwd["frame"] if fwd else "", "ts_ns": start,
                                 "dur_ns": (m.duration_us or 0) * 1000,
                                 "_cache": cache_counts(m)})
                    continue
                if cid in self._limits:
                    continue
                if "recompile limit" in (m.fail_reason or ""):
                    self._add("limit_hit", ts_ns=start, compile_id=cid, reason=shorten(m.fail_reason))
                    continue
            name, frame = frame_of(m)
            reasons = self._reasons.get(cid) or ([m.recompile_reason] if m.recompile_reason else [])
            kind = "recompile" if reasons else "compile"
            if m.fail_type is not None:
                kind, reasons = "compile_failed", [f"{m.fail_type}: {m.fail_reason}"]
            ops = m.graph_op_count or 0
            row = {**_ROW, "kind": kind, "name": name, "frame": frame, "compile_id": cid,
                   "reason": shorten("; ".join(reasons), 2000), "ts_ns": start,
                   "dur_ns": (m.duration_us or 0) * 1000, "graphs": int(ops > 0), "ops": ops,
                   "guards": m.guard_count or 0, "_times": compile_times(m),
                   "_cache": cache_counts(m)}
            skip = getattr(m, "cudagraph_skip_reason", None)
            if skip and not any(r["kind"] == "cudagraph_skip" and r["compile_id"] == cid
                                for r in self._rows):
                self._add("cudagraph_skip", ts_ns=start + row["dur_ns"], reason=shorten(skip),
                          compile_id=cid)
            rows.append(row)
            by_id[cid] = row
        for row in rows:
            hits, misses = row.pop("_cache")
            row["cache"] = "miss" if misses else "hit" if hits else ""
        return rows

    def _counter_fallback_rows(self, rows) -> list:
        """Graph breaks and cudagraph skips from counters where the logs gave none."""
        now, before, out, t = counter_snapshot(), self._counters0, [], time.time_ns()
        if not any(r["kind"] == "graph_break" for r in rows):
            for key in ("graph_break", "unimplemented"):
                for msg, n in now.get(key, {}).items():
                    if not msg.startswith("Dynamo recompile limit exceeded"):
                        out += [{**_ROW, "kind": "graph_break", "frame": user_frame(msg),
                                 "reason": shorten(msg), "ts_ns": t}
                                for _ in range(n - before.get(key, {}).get(msg, 0))]
        skips = now.get("cudagraph_skips", 0) - before.get("cudagraph_skips", 0)
        skips -= sum(r["kind"] == "cudagraph_skip" for r in rows)
        out += [{**_ROW, "kind": "cudagraph_skip", "reason": "(counted only)", "ts_ns": t}
                for _ in range(max(0, skips))]
        self._graphs_counted = now.get("unique_graphs", 0) - before.get("unique_graphs", 0)
        return out


class _Handler(logging.Handler):
    """Ours on the artifact loggers (which no longer propagate) and on convert_frame."""

    def __init__(self, rec):
        super().__init__(logging.DEBUG)
        self.rec = rec

    def emit(self, record):
        # a record can reach us twice: forwarded by us, or propagating to convert_frame
        # after someone re-enabled propagation (set_logs) before the next install()
        if getattr(record, "_nbtools_seen", False):
            return
        record._nbtools_seen = True
        rec = self.rec
        try:
            # propagate by hand where torch would have printed the record without us
            log = logging.getLogger(record.name)
            if record.name in rec._threshold and not log.propagate and log.parent is not None \
                    and record.levelno >= rec._threshold[record.name]:
                log.parent.handle(record)
            if rec._active:
                rec._on_record(record)
        except Exception:   # never break a compile because of bookkeeping
            rec._errors += 1
