"""Advice from a run's compile events: recompiles on changing shapes, recompiles on an
nn.Module's integer attribute (a layer index), the recompile limit hit, graph breaks, and
torch.compile(DDP(model)) that compiled nothing. Each rule reads run.compile_events (the
guard failures as Dynamo logged them), run.steps and what the engines reported
(run.ranks[r]['compile_outcome']); none re-derives a fact from the config alone.
Pure: no torch."""
from __future__ import annotations

import re

import pandas as pd

from nbtools.analysis.advice.suggestion import Suggestion, ab_cost

# "tensor 'x' size mismatch at index 1. expected 17, actual 23" (torch 2.11-2.13)
_SIZE = re.compile(r"tensor '([^']+)' size mismatch at index (\d+)\. expected (\d+), actual (\d+)")
# "self.layer_idx == 1", "self._modules['self_attn'].layer_idx == 0", "L['self'].n == 3":
# an integer attribute of a module, guarded as a constant (the HF Llama case)
_MODULE_INT = re.compile(
    r"((?:self|L\['self'\])(?:\._modules\['\w+'\]|\.\w+)*?\.(\w+)) == (-?\d+)")
# transformers 5.x: the same per-block compile guards on the KV cache's entry for the
# block's layer_idx instead: "kwargs['cache'].layers[3].is_initialized == False"
_CACHE_LAYER = re.compile(r"(\S*(?:cache|past_key_values)\S*?\.layers)\[(\d+)\]")


def run_seconds(run) -> float:
    """Wall seconds of the run's steps on its slowest rank (warm-up steps hold the
    compiles, so recompile time is inside it)."""
    s = run.steps
    return float(s.groupby("rank")["dur_ns"].sum().max()) / 1e9 if len(s) else 0.0


def _recompile_s(ce: pd.DataFrame, rows: pd.DataFrame) -> float:
    """Seconds spent on these recompiles, their lazy backward compiles included, on the
    rank that spent most."""
    if not len(rows):
        return 0.0
    ids = set(zip(rows["rank"], rows["compile_id"]))
    bwd = ce[(ce["kind"] == "backward_compile")]
    bwd = bwd[[(r, c) in ids for r, c in zip(bwd["rank"], bwd["compile_id"])]]
    both = pd.concat([rows, bwd])
    return float(both.groupby("rank")["dur_ns"].sum().max()) / 1e9


def _share(lost: float, run) -> float:
    total = run_seconds(run)
    return min(1.0, lost / total) if total > 0 else 0.0


def _frame(row) -> str:
    return f"{row['name']} ({row['frame']})" if row["name"] else str(row["frame"] or "?")


def _ranks(rows) -> tuple:
    return tuple(sorted({int(r) for r in rows["rank"]}))


def recompile_shapes(run) -> list[Suggestion]:
    """Recompiles whose guard failed on a tensor's size. Fires under dynamic='static' at
    the first such recompile, under 'auto' from the second (automatic dynamic recompiles
    once by design). Score: those recompiles' seconds over the run's."""
    cfg, ce = run.config, run.compile_events
    if cfg is None or not len(ce) or cfg.dynamic not in ("static", "auto"):
        return []
    rec = ce[ce["kind"] == "recompile"]
    hits = rec[rec["reason"].str.contains("size mismatch at index", regex=False)]
    if not len(hits) or (cfg.dynamic == "auto" and hits.groupby("rank").size().max() < 2):
        return []
    dims: dict = {}
    for reason in hits["reason"]:
        for name, idx, exp, act in _SIZE.findall(reason):
            dims.setdefault((name, int(idx)), set()).update((int(exp), int(act)))
    (name, idx), sizes = max(dims.items(), key=lambda kv: len(kv[1]))
    var = name if name.isidentifier() else "x"   # "L['x']" and the like: a plain name
    lost = _recompile_s(ce, hits)
    per_rank = int(hits.groupby("rank").size().max())
    first = hits.sort_values("ts_ns").iloc[0]
    sequence = cfg.scenario != "custom" and cfg.resolved_schedule != "fixed"
    # mark_dynamic names the dimension (the lab knows it for built-in scenarios and
    # Workloads with dynamic_dims; a step function cannot take it): dynamic otherwise
    change = {"dynamic": "mark"} if cfg.scenario != "custom" else {"dynamic": "dynamic"}
    return [Suggestion(
        rule="recompile-shapes",
        title=f"Compile dimension {idx} of {name!r} as dynamic instead of once per size",
        change=change,
        evidence=(f"{per_rank} recompile(s) of {_frame(first)} on a rank, each on a new size "
                  f"of {name!r} at index {idx} (seen: {', '.join(map(str, sorted(sizes)))}); "
                  f"{lost:.2f} s of recompiles in a {run_seconds(run):.2f} s run "
                  f"(dynamic={cfg.dynamic!r}); first guard: {_gist(first['reason'])}"),
        why=("A static-shape graph guards on every size, so each new length compiles a new "
             "graph (and counts toward the recompile limit); a dynamic dimension compiles "
             "one graph for all lengths."),
        code=(f"torch._dynamo.mark_dynamic({var}, {idx})   # before calling the compiled model\n"
              "# or: model = torch.compile(model, dynamic=True)\n"
              + ("# or pad lengths to a few buckets: StepConfig(seq_schedule='bucketed')"
                 if sequence else "# or pad inputs to a few fixed sizes")),
        cost=ab_cost("a recompile per side;"), about=_frame(first),
        score=_share(lost, run), ranks=_ranks(hits))]


def module_int_guard(run) -> list[Suggestion]:
    """Recompiles of one frame whose guards fail on an integer attribute of a module
    (``self.layer_idx == 0``): every block with another value compiles its own graph.
    No StepConfig field fixes it: the fix is in the model's code. Score: those
    recompiles' seconds over the run's, plus 0.5 when they ran into the recompile limit
    (after it the frame runs eagerly)."""
    ce = run.compile_events
    if not len(ce):
        return []
    rows = ce[ce["kind"].isin(("recompile", "limit_hit"))]
    found, attrs, kv_cache = [], {}, False
    for i, reason in zip(rows.index, rows["reason"]):
        for m in _MODULE_INT.finditer(reason):
            found.append(i)
            attrs.setdefault((m.group(1), m.group(2)), set()).add(int(m.group(3)))
        for m in _CACHE_LAYER.finditer(reason):   # a KV cache indexed by layer_idx
            found.append(i)
            kv_cache = True
            attrs.setdefault((m.group(1) + "[layer_idx]", "layer_idx"), set()).add(int(m.group(2)))
    if not found:
        return []
    (path, attr), values = max(attrs.items(), key=lambda kv: len(kv[1]))
    hit = rows.loc[sorted(set(found))]
    rec = hit[hit["kind"] == "recompile"]
    limit = (hit["kind"] == "limit_hit").any()
    lost = _recompile_s(ce, rec)
    first = hit.sort_values("ts_ns").iloc[0]
    hf = attr == "layer_idx"
    code = ("# the module's int is a constant to torch.compile: each value is a graph\n"
            + ("model.config.use_cache = False   # HF: the KV cache reads layer_idx in forward\n"
               if hf else "")
            + f"# keep {attr} out of forward (precompute what depends on it in __init__),\n"
              f"# or pass it as a tensor, or let Dynamo treat module ints as dynamic:\n"
              "torch._dynamo.config.allow_unspec_int_on_nn_module = True\n"
              "# or compile the whole model once instead of each block")
    return [Suggestion(
        rule="module-int-guard",
        title=(f"Stop forward reading the per-module int {attr!r}"
               + (" (use_cache=False for HF models)" if hf else "")),
        change={},
        # HF models read config.use_cache when forward is not given it: the lab can try that
        # where the guards show HF's KV cache or the frame is transformers' own
        model_patch=({"config.use_cache": False} if hf and (
            kv_cache or "transformers" in str(first["frame"])) else {}),
        evidence=(f"{int(rec.groupby('rank').size().max()) if len(rec) else 0} recompile(s) of "
                  f"{_frame(first)}, one per value of {path} (seen: "
                  f"{', '.join(map(str, sorted(values)))})"
                  + (", and it hit the recompile limit: that frame runs eagerly from then on"
                     if limit else "")
                  + f"; {lost:.2f} s of recompiles in a {run_seconds(run):.2f} s run"),
        why=("torch.compile treats an integer attribute of an nn.Module as a constant and "
             "guards on it, so blocks that differ only in it each need their own graph of "
             "one shared frame, all counted toward one recompile limit."),
        code=code, cost=ab_cost("an edit to the model, then"), about=_frame(first),
        score=min(1.0, _share(lost, run) + (0.5 if limit else 0.0)), ranks=_ranks(hit))]


def recompile_limit(run) -> list[Suggestion]:
    """A frame hit the recompile limit: it runs eagerly from then on. Score 0.5 (what runs
    eagerly after it is not timed apart): below a rule that names the cause."""
    ce = run.compile_events
    hits = ce[ce["kind"] == "limit_hit"] if len(ce) else ce
    if not len(hits):
        return []
    first = hits.sort_values("ts_ns").iloc[0]
    limit = re.search(r"recompile_limit \((\d+)\)", first["reason"])
    n = int(limit.group(1)) if limit else 8
    return [Suggestion(
        rule="recompile-limit",
        title="Remove what recompiles (or raise the recompile limit)",
        change={},
        evidence=(f"{_frame(first)} hit the recompile limit ({n}) at step {int(first['step'])} "
                  f"on rank(s) {', '.join(map(str, _ranks(hits)))}: it runs eagerly from then "
                  f"on. {_gist(first['reason'].split('from now on. ', 1)[-1], 200)}"),
        why=("After recompile_limit graphs of one frame Dynamo stops compiling it and runs "
             "it eagerly, so the run pays for the compiles and gets eager speed."),
        code=("# first remove the cause named in the guard failures (other suggestions)\n"
              f"torch._dynamo.config.recompile_limit = {n * 8}   # if every variant is wanted\n"
              "# TORCH_LOGS=recompiles python train.py   # every guard failure, as it happens"),
        cost="an edit, then a rerun (more graphs: more compile time and memory)",
        about=_frame(first),
        score=0.5, ranks=_ranks(hits))]


_BREAK_FIX = (
    (r"print|logging|builtin", "move the print/log out of the compiled function (or log "
     "after the step)"),
    (r"\.item\(|item\b|scalar", "keep the value a tensor, or "
     "torch._dynamo.config.capture_scalar_outputs = True"),
    (r"[Dd]ata-dependent|branch|jump", "replace the data-dependent `if` with torch.where or "
     "torch.cond"),
)


def graph_breaks(run) -> list[Suggestion]:
    """Graph breaks at the lines the compile events name, with a fix per kind of reason.
    A break's own cost is not in the tables (the graphs around it still run compiled):
    score 0.05 per distinct line, at most 0.3, so measured losses rank first.
    torch.compile(DDP(model))'s breaks belong to ddp_compile_outside."""
    cfg, ce = run.config, run.compile_events
    if not len(ce) or _ddp_outside(cfg):
        return []
    br = ce[ce["kind"] == "graph_break"]
    if not len(br):
        return []
    # times a line broke on one rank (every rank breaks at the same line: count it once)
    # observed: the string columns are categoricals over every compile row's values
    sites = br.groupby(["frame", "reason", "rank"], observed=True).size() \
        .groupby(level=[0, 1], observed=True).max().sort_values(ascending=False)
    sites = sites[sites > 0]
    n = int(br.groupby("rank").size().max())
    where = "; ".join(f"{f or '?'}: {_gist(r)} ({c}x)" for (f, r), c in sites.head(3).items())
    fixes = []
    for (f, r), _ in sites.head(3).items():
        fix = next((t for pat, t in _BREAK_FIX if re.search(pat, r)),
                   "see torch._dynamo.explain(fn)(*inputs) for what to change")
        fixes.append(f"# {f or '?'}: {fix}")
    return [Suggestion(
        rule="graph-breaks",
        title=f"Remove the graph break{'s' if len(sites) > 1 else ''} at "
              f"{sites.index[0][0] or '?'}",
        change={},
        evidence=f"{n} graph break(s) on a rank at {len(sites)} line(s): {where}",
        why=("Dynamo stops tracing at the line it cannot capture and runs it in Python, so "
             "the code becomes several graphs: fewer fusions, more launches, Python between."),
        code="\n".join(fixes + ["model = torch.compile(model, fullgraph=True)   # the first "
                                "break raises, naming its line (lab: fullgraph=True)"]),
        cost=ab_cost("an edit, then"),
        score=min(0.3, 0.05 * len(sites)), ranks=_ranks(br))]


_GLOBAL = re.compile(r"GLOBAL_STATE changed: ([\w(),. ]+?)\s*(?:;|$)")
_GLOBAL_FIX = {
    "autocast": ("Enter autocast the same way at every call of the compiled code",
                 "# enter autocast inside the compiled function, so every call traces it:\n"
                 "@torch.compile\n"
                 "def forward_loss(x, y):\n"
                 "    with torch.autocast(device_type, dtype=torch.bfloat16):\n"
                 "        return loss_fn(model(x), y)\n"
                 "# or call it under the same autocast every time (train and eval alike)"),
    "grad_mode": ("Call the compiled code in one grad mode (or compile eval apart)",
                  "eval_model = torch.compile(model)   # a second compiled callable for\n"
                  "with torch.no_grad():               # no_grad calls, so neither guard fails\n"
                  "    eval_model(x)"),
}


def global_state(run) -> list[Suggestion]:
    """Recompiles because global state differed between calls of compiled code (autocast
    entered outside it on some calls only, grad mode): each state is its own graph, and
    each counts toward the recompile limit. Score: those recompiles' seconds over the
    run's."""
    ce = run.compile_events
    rec = ce[ce["kind"] == "recompile"] if len(ce) else ce
    hits = rec[rec["reason"].str.contains("GLOBAL_STATE changed", regex=False)] if len(rec) else rec
    if not len(hits):
        return []
    states = sorted({m.strip() for r in hits["reason"] for m in _GLOBAL.findall(r)})
    key = next((k for k in _GLOBAL_FIX if any(k in st for st in states)), None)
    title, code = _GLOBAL_FIX.get(key, ("Keep global state the same at every call of the "
                                        "compiled code",
                                        "# set it once, outside the loop, or inside the "
                                        "compiled function"))
    lost = _recompile_s(ce, hits)
    first = hits.sort_values("ts_ns").iloc[0]
    return [Suggestion(
        rule="global-state",
        title=title, change={},
        evidence=(f"{int(hits.groupby('rank').size().max())} recompile(s) of {_frame(first)} "
                  f"on a rank because {', '.join(states) or 'global state'} changed between "
                  f"calls (step {int(first['step'])}); {lost:.2f} s of recompiles in a "
                  f"{run_seconds(run):.2f} s run"),
        why=("Compiled code guards on global state such as autocast and grad mode, so calling "
             "it under another state compiles another graph (counted toward the recompile "
             "limit); state set inside the compiled function is traced instead."),
        code=code, cost=ab_cost("an edit, then"), about=_frame(first),
        score=_share(lost, run), ranks=_ranks(hits))]


def _gist(reason: str, n: int = 160) -> str:
    """The part of a graph-break reason that says what broke: torch 2.13 starts each with
    "Encountered graph break when attempting to trace CALL: ... — " before it."""
    return " ".join(reason.split(" — ", 1)[-1].split())[:n]


def _ddp_outside(cfg) -> bool:
    return (cfg is not None and cfg.scenario != "custom" and cfg.compiled
            and cfg.resolved_parallel == "ddp" and cfg.ddp_wrap == "compile-outside")


def ddp_compile_outside(run) -> list[Suggestion]:
    """torch.compile(DDP(model)) where the engines report it compiled nothing (ran eagerly)
    or broke in DDP's forward. Score 1.0 when nothing was compiled (the compile bought
    nothing), else 0.5."""
    if not _ddp_outside(run.config):
        return []
    oc = {r: (d or {}).get("compile_outcome") or {} for r, d in run.ranks.items()}
    oc = {r: o for r, o in oc.items() if o}
    if not oc:
        return []
    eager = all(o.get("state") == "eager" for o in oc.values())
    breaks = max(int(o.get("graph_breaks", 0)) for o in oc.values())
    if not eager and not breaks:
        return []
    graphs = max(int(o.get("graphs", 0)) for o in oc.values())
    return [Suggestion(
        rule="ddp-compile-outside",
        title="Compile inside DDP: DDP(torch.compile(model))",
        change={"ddp_wrap": "compile-inside"},
        evidence=(f"ddp_wrap='compile-outside': the ranks report "
                  + ("0 graphs compiled and no compiled code run (ran eagerly)" if eager else
                     f"{breaks} graph break(s) in DDP's forward and {graphs} graph(s)")
                  + f" (compile_outcome of rank(s) {', '.join(map(str, sorted(oc)))})"),
        why=("Dynamo graph-breaks in DDP's own forward (pytorch #140416), so compiling around "
             "DDP compiles the model without DDP's per-bucket split, or nothing at all."),
        code=("model = DDP(torch.compile(model), device_ids=[local_rank])\n"
              "# not torch.compile(DDP(model))"),
        cost=ab_cost("a compile per side;"),
        score=1.0 if eager else 0.5, ranks=tuple(sorted(oc)))]


RULES = (ddp_compile_outside, module_int_guard, recompile_shapes, global_state, recompile_limit,
         graph_breaks)
