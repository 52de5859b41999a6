"""Summaries of a run's compile rows (compile_events.py): one rank's counts (compiles,
graphs, cudagraph records, compile times, the signature of what was compiled), and the first
difference between ranks' counts as a sentence. The signature is built and compared here,
in one place. Pure and torch-free: ``divergence`` runs on the client.
"""
from __future__ import annotations

import hashlib


# Rows whose time is compile time (compile_s): forward frames and the backward graphs
# AOTAutograd compiles at their first backward (can be most of it: a 204-s max-autotune DDP
# first step whose forward took 50.6 s)
COMPILE_KINDS = ("compile", "recompile", "backward_compile")


def wall_s(rows) -> float:
    """Wall seconds one rank spent compiling: the union of its compile rows' intervals
    (dicts, or a DataFrame with ts_ns and dur_ns), so a compile nested in another (a
    backward compiled inside a forward's frame) counts once. Across ranks take the largest
    (the ranks compile side by side), never the sum."""
    if hasattr(rows, "to_dict"):
        rows = rows[["ts_ns", "dur_ns"]].to_dict("records")
    spans = sorted((int(r["ts_ns"]), int(r["ts_ns"]) + int(r["dur_ns"])) for r in rows)
    total, end = 0, None
    for lo, hi in spans:
        if end is None or lo >= end:
            total += hi - lo
            end = hi
        elif hi > end:
            total += hi - end
            end = hi
    return total / 1e9


# What a rank's compile signature is made of: the events whose sequence says which graphs
# it compiled (cudagraph records and compile times may differ between ranks without that)
SIGNATURE_KINDS = ("compile", "recompile", "compile_failed", "graph_break", "limit_hit")


def signature(events) -> tuple[list, str]:
    """A rank's compile signature from its compile events in time order, each a (kind,
    frame name, ops, guards): [kind, name, ops, guards] of every event of SIGNATURE_KINDS,
    and a short hash of it (equal hashes: the ranks compiled the same graphs). Built here
    only: the engine's counts (rank_counts) and the client's table
    (counts.compile_signatures) must agree on it."""
    sig = [[str(k), str(n), int(o), int(g)] for k, n, o, g in events if k in SIGNATURE_KINDS]
    return sig, hashlib.sha1(repr(sig).encode()).hexdigest()[:12]


# -- engine side: counts of one rank, at finish_run -------------------------------------
def rank_counts(rows, graphs_counted: int, errors: int) -> dict:
    """One rank's counts from its finished compile rows (CompileRecorder.finish_run);
    ``graphs_counted``: unique graphs by Dynamo's counters, ``errors``: the recorder's own
    failures. Pops each row's ``_times``."""
    kinds = [r["kind"] for r in rows]
    times = {r["compile_id"]: r.pop("_times") for r in rows if "_times" in r}
    sig, sig_hash = signature((r["kind"], r["name"], r["ops"], r["guards"]) for r in rows)
    graphs = sum(r["graphs"] for r in rows if r["kind"] in ("compile", "recompile"))
    return {
        "compiles": kinds.count("compile") + kinds.count("recompile"),
        "recompiles": kinds.count("recompile"),
        "compile_failures": kinds.count("compile_failed"),
        "graph_breaks": kinds.count("graph_break"),
        "graphs": int(max(graphs_counted, graphs)),
        "cudagraph_records": kinds.count("cudagraph_record"),
        "cudagraph_rerecords": kinds.count("cudagraph_rerecord"),
        "cudagraph_skips": kinds.count("cudagraph_skip"),
        "limit_hit": "limit_hit" in kinds,
        "compile_s": round(wall_s([r for r in rows if r["kind"] in COMPILE_KINDS]), 6),
        "compile_times": times,  # compile id -> ms: total ⊇ backend ⊇ inductor ⊇ codegen; dynamo, bwd
        "signature": sig,        # [kind, frame name, ops, guards] in time order
        "signature_hash": sig_hash,
        "recorder_errors": errors,
    }


def outcome(counts: dict, requested: bool, reused: bool) -> dict:
    """What this run's compile did, from what happened (engine side, at the end of _run):
    ``state`` is ``compiled`` (this run compiled graphs), ``reused`` (it compiled none and
    ran graphs compiled by an earlier run), ``eager`` (compile was asked for, yet no graph
    was compiled and none ran), ``off`` (not asked for, nothing compiled or ran) or
    ``unknown`` (no graph compiled and whether compiled code ran could not be read).
    ``requested``: the config asked for compile; ``reused``: the engine kept its built
    state from the previous run. The client's flags read this; they never re-derive it."""
    graphs, ran, cached = int(counts.get("graphs", 0)), counts.get("frames_run"), \
        counts.get("graphs_cached")
    if graphs > 0:
        state = "compiled"
    elif ran is None or (ran and cached is None):
        state = "unknown"
    elif ran and cached:
        state = "reused"
    else:
        state = "eager" if requested else "off"
    return dict(state=state, graphs=graphs, frames_run=ran, graphs_cached=cached,
                reused_build=bool(reused), graph_breaks=int(counts.get("graph_breaks", 0)),
                recompiles=int(counts.get("recompiles", 0)),
                limit_hit=bool(counts.get("limit_hit", False)))


# -- client side: pure, torch-free -----------------------------------------------------
_COUNT_WORDS = (("limit_hit", None), ("recompiles", "recompiled {} time(s)"),
                ("compiles", "compiled {} frame(s)"), ("compile_failures", "failed {} compile(s)"),
                ("graph_breaks", "hit {} graph break(s)"), ("graphs", "produced {} graph(s)"),
                ("cudagraph_skips", "skipped CUDA graphs {} time(s)"),
                ("cudagraph_records", "recorded {} CUDA graph(s)"))


def divergence(per_rank_counts: dict) -> str | None:
    """First difference between ranks' ``counts`` (from finish_run) as a sentence, or None
    when every rank compiled the same way. Each rank is compared with the lowest one."""
    ranks = sorted(per_rank_counts)
    if len(ranks) < 2:
        return None
    r0, c0 = ranks[0], per_rank_counts[ranks[0]]
    for key, words in _COUNT_WORDS:
        for r in ranks[1:]:
            a, b = per_rank_counts[r].get(key), c0.get(key)
            if a is None or b is None or a == b:
                continue
            if words is None:
                hit, miss = (r, r0) if a else (r0, r)
                return f"rank {hit} hit the recompile limit, rank {miss} did not"
            return f"rank {r} {words.format(a)}, rank {r0} {b}"
    s0 = c0.get("signature") or []
    for r in ranks[1:]:
        s = per_rank_counts[r].get("signature") or []
        for i, (x, y) in enumerate(zip(s, s0)):
            if list(x) == list(y):
                continue
            what = f"event {i + 1} ({y[0]} of {y[1]!r})"
            if (x[0], x[1]) != (y[0], y[1]):
                return f"event {i + 1}: rank {r} has {x[0]} of {x[1]!r}, rank {r0} {y[0]} of {y[1]!r}"
            if x[2] != y[2]:
                return f"{what}: different graphs, rank {r} traced {x[2]} ops, rank {r0} {y[2]}"
            return f"{what}: different guards, rank {r} has {x[3]}, rank {r0} {y[3]}"
        if len(s) != len(s0):
            longer, extra = (r, s[len(s0)]) if len(s) > len(s0) else (r0, s0[len(s)])
            return (f"rank {longer} has {abs(len(s) - len(s0))} more compile event(s), the first "
                    f"a {extra[0]} of {extra[1]!r}")
    return None
