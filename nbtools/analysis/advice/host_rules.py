"""Advice that starts from why the step takes its time (diagnosis.py): the move that fits
the diagnosis, and none that does not.

- the GPU waits for launches in an inference, DDP, TP or single-rank step, the host's time
  going to launching and the Python between launches: CUDA graphs (one launch a step);
- the GPU waits for the host in an FSDP2 training step: what shortens the host's part
  (a fused or compiled optimizer, one compiled graph instead of one per block, keeping the
  gathered parameters for backward), never CUDA graphs, which cannot replay FSDP2's hooks;
- the host blocks in syncs: the line that syncs;
- an eager step: compile first, on CPU ranks too;
- little memory and a GPU that is seldom busy: a larger batch, judged by items per second.

Each rule says which rank's numbers it read; what a rule deliberately does not propose is
listed by ``not_proposed`` with the reason. Pure: no torch."""
from __future__ import annotations

import math

from nbtools.analysis.advice.diagnosis import BOUND_SHARE, diagnose, worst
from nbtools.analysis.advice.suggestion import Suggestion, ab_cost
from nbtools.analysis.idle import CAUSE_WORDS
from nbtools.config.engine_notes import fused_line, fused_refusal, sharded_whole
from nbtools.config.script_code import fsdp_lines
from nbtools.config.step_config import CAPTURING_MODES

# host causes a CUDA graph removes: the launches themselves and the Python between them
_LAUNCH_LIKE = ("launch", "compiled", "forward", "autograd", "other")
SMALL_KERNEL_US = 100.0
"""Kernels shorter than this on average are ones a launch (5-10 us of host time each) can
keep up with only barely: launch-bound territory."""
CAUSE_SHARE = 0.05
"""A host cause worth its own move: at least this share of the profiled step, or twice it
of the host wait (a screen round costs four runs, so a move is tried on modest evidence
and kept only on proof)."""
SYNC_SHARE = 0.05
MEMORY_SHARE = 0.40
SM_ACTIVE_PCT = 50.0     # SM activity (GPM) below this on a busy GPU: kernels too small
"""A GPU rank whose peak memory is below this share of the device's has room to double
its batch (activations grow about linearly with it)."""


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _ranks(ds) -> tuple:
    return tuple(d.rank for d in ds)


def cuda_graphs(run) -> list[Suggestion]:
    """The GPU waits for launches (host wait or launch gaps are the largest part of its
    idle time, at least 30 % of the step) and the host's time in those gaps is launching and
    the Python around it, in a step CUDA graphs can replay: inference, DDP, TP or one rank.
    Score: the wait's share of the step."""
    cfg = run.config
    ds = [d for d in diagnose(run) if d.bound in ("host", "kernel")]
    if cfg is None or not ds or fsdp_training(run):
        return []
    d = worst(ds)
    if cfg.cudagraph != "off" or cfg.compile in CAPTURING_MODES:
        return []      # graphs are on already: cudagraph_skips says why some were not
    wait = d.waits.get(d.bound, 0.0)
    if d.bound == "host":
        launchy = sum(d.host.get(c, 0.0) for c in _LAUNCH_LIKE)
        if wait <= 0 or launchy < 0.5 * wait:
            return []   # the host was elsewhere (optimizer, hooks, syncs): other rules
    if d.kernel_us == d.kernel_us and d.kernel_us > SMALL_KERNEL_US:
        return []
    change = ({"compile": "reduce-overhead"} if cfg.compile in ("off", "default") and
              cfg.backend == "inductor" else
              {"compile": "max-autotune"} if cfg.compile == "max-autotune-no-cudagraphs" else
              {"cudagraph": "manual"})
    return [Suggestion(
        rule="launch-bound",
        title="Launch the step as CUDA graphs (reduce-overhead), not kernel by kernel",
        change=change,
        evidence=d.text + (f"; rank(s) {', '.join(map(str, _ranks(ds)))} alike"
                           if len(ds) > 1 else ""),
        why=("Each kernel is launched from Python on the host; when a launch and the Python "
             "around it take longer than the kernel, the GPU waits between kernels, and a "
             "CUDA graph replays the whole step's kernels with one launch."),
        code=("model = torch.compile(model, mode=\"reduce-overhead\")   # CUDA graphs by inductor\n"
              "# or capture the step yourself (static shapes, static input buffers):\n"
              "g = torch.cuda.CUDAGraph()\n"
              "with torch.cuda.graph(g):\n"
              "    out = model(static_x)\n"
              "static_x.copy_(x); g.replay()"),
        cost=ab_cost("a compile, then"), about="launch",
        score=min(1.0, d.share(wait)), ranks=_ranks(ds))]


def fsdp_training(run) -> bool:
    """The step is an FSDP2 training step (where CUDA graphs cannot replay the hooks)."""
    cfg = run.config
    return cfg is not None and cfg.resolved_parallel == "fsdp2" and trains(run)


def trains(run) -> bool:
    """The step trains (a loss, backward, an optimizer), as the engines reported it."""
    said = {m.get("train") for m in run.ranks.values() if isinstance(m, dict)} - {None}
    if said:
        return any(said)
    cfg = run.config
    if cfg is None or cfg.scenario == "custom":
        return cfg is not None       # a step function: taken to train, as code() shows it
    from nbtools.config.scenarios import scenario_spec
    return scenario_spec(cfg.scenario).train


_NO_GRAPHS = ("CUDA graphs (compile='reduce-overhead') are not proposed for this FSDP2 "
              "training step: FSDP2's hooks run Python between the blocks of every step "
              "(all-gathers before, reduce-scatters after), which a captured graph cannot "
              "replay, so each block's graph is cut at the hooks and the host still runs "
              "them; the lab refuses cudagraph='manual' for FSDP2 for the same reason (on "
              "1 x H200 a host-bound Llama FSDP2 step read 1.75x slower under "
              "reduce-overhead, unresolved after 48 runs)")


def host_fsdp(run) -> list[Suggestion]:
    """An FSDP2 training step that waits on its host: one suggestion per host cause worth
    it (at least 10 % of the step), each a move that shortens that part. Score: the
    cause's share of the step."""
    cfg = run.config
    if cfg is None or not fsdp_training(run):
        return []
    ds = [d for d in diagnose(run) if d.bound == "host"]
    if not ds:
        return []
    d = worst(ds)
    out = []
    head = (f"rank {d.rank}: the GPU waited for the host {d.waits['host']:.3g} ms of a "
            f"{d.window_ms:.3g} ms profiled step ({_pct(d.host_share)})")

    def add(cause, rule, title, change, why, code):
        ms = d.host.get(cause, 0.0)
        if not (d.share(ms) >= CAUSE_SHARE or ms >= 2 * CAUSE_SHARE * d.waits["host"] > 0):
            return
        out.append(Suggestion(
            rule=rule, title=title, change=change,
            evidence=(f"{head}; of it {CAUSE_WORDS[cause]} {ms:.3g} ms "
                      f"({_pct(d.share(ms))} of the step)" + _stretch(d) + "."
                      + d.signals_text()),
            why=why, code=code, cost=ab_cost(""), about=f"host:{cause}",
            score=min(1.0, d.share(ms)), ranks=_ranks(ds)))

    if cfg.optimizer_impl in ("as-built", "foreach") and \
            not fused_refusal(run, cfg.resolved_parallel):   # else optimizer_rules says why
        add("optimizer", "host-optimizer", "Fuse the optimizer step (fused=True)",
            {"optimizer_impl": "fused"},
            "A for-loop or foreach optimizer launches several kernels per parameter group "
            "from Python; fused=True does the whole update in a few kernels, so the host "
            "spends far less time in the step.", fused_line(run))
    if cfg.optimizer_impl != "compiled":
        add("optimizer", "host-optimizer-compiled", "Compile the optimizer step",
            {"optimizer_impl": "compiled"},
            "torch.compile turns the optimizer's per-parameter Python loop into a few "
            "generated kernels (PyTorch's compiled-optimizer recipe): less host time a step, "
            "after a compile.",
            "@torch.compile(fullgraph=False)\ndef opt_step():\n    opt.step()")
    if cfg.compiled and cfg.fsdp_compile == "per-block":
        add("compiled", "host-per-block-calls", "Compile the sharded model whole, not block by "
            "block", {"fsdp_compile": "whole"},
            "Each per-block graph is a call from Python with its own guards and wrapper, so "
            "the host pays that per block per step; one compile of the whole sharded model "
            "makes fewer calls (FSDP2's hooks still cut it into pieces).",
            "model = torch.compile(model)   # after fully_shard of every block and the root")
    if cfg.reshard_after_forward:
        add("hooks", "host-fsdp-hooks", "Keep the gathered parameters until backward "
            "(reshard_after_forward=False)", {"reshard_after_forward": False},
            "With resharding after forward every block is all-gathered again for backward, "
            "with its hooks and copies on the host; keeping the parameters removes that "
            "second gather and its host work (more memory: the unsharded parameters).",
            "\n".join(fsdp_lines(False, not sharded_whole(run), cfg.scenario == "custom")))
    return out


def host_syncs(run) -> list[Suggestion]:
    """The host blocks in syncs (.item(), .cpu(), torch.cuda.synchronize) for at least 5 %
    of the step while the GPU waits: the fix is the line that syncs, which a run with
    StepConfig(stack=True) names. Score: the sync share of the step."""
    ds = [d for d in diagnose(run) if d.device == "gpu"]
    if not ds:
        return []
    d = max(ds, key=lambda x: x.host.get("sync", 0.0))
    ms = d.host.get("sync", 0.0)
    if not d.share(ms) >= SYNC_SHARE:
        return []
    lines = sync_lines(run)
    where = ("; the syncing calls: " + "; ".join(f"{n}x {text}" for text, n in lines[:3])
             if lines else "")
    if lines:
        code = ("# the lines that sync (from the profiled stack):\n" +
                "\n".join(f"#   {text}" for text, _ in lines[:3]) +
                "\n# keep values on the GPU (no .item()/.cpu()/print of a tensor in the step),"
                "\n# or read them every N steps, or copy asynchronously: x.to('cpu', "
                "non_blocking=True)")
    else:
        code = ("# find the line: run again with the Python stack recorded\n"
                "run = lab.run(..., stack=True)   # each sync's tooltip names your line\n"
                "# then keep values on the GPU (no .item()/.cpu()/print of a tensor)")
    return [Suggestion(
        rule="host-syncs", title="Remove the host syncs from the step",
        change={},
        evidence=(f"rank {d.rank}: the host blocked in syncs {ms:.3g} ms of a "
                  f"{d.window_ms:.3g} ms profiled step ({_pct(d.share(ms))}) while the GPU "
                  "waited for its next launch" + where),
        why=("A sync makes the host wait until the GPU has finished everything queued, so "
             "the queue runs dry and the GPU then waits for the host's next launches."),
        code=code, cost="an edit, then one A/B" if lines else
        "a run with stack=True, an edit, then one A/B",
        about="host:sync", score=min(1.0, d.share(ms)), ranks=(d.rank,))]


def sync_lines(run) -> list:
    """[(stack text, count)] of the host syncs in the profiled steps whose op has a Python
    stack (StepConfig(stack=True)), most frequent first."""
    ev, det = run.events, run.event_details
    if ev is None or not len(ev) or det is None or not len(det):
        return []
    names = ev["name"].astype(str)
    sync = ev[(ev["category"] == "sync") & names.str.contains("Synchronize|Memcpy") &
              ~names.str.contains("WaitEvent|Async")]
    if not len(sync):
        return []
    d = det[det["detail"].astype(str).str.contains("stack: ")]
    ops = ev.merge(d[["rank", "ts_ns", "name", "detail"]].assign(
        name=d["name"].astype(str)), left_on=["rank", "ts_ns", names], right_on=["rank", "ts_ns",
                                                                             "name"])
    if not len(ops):
        return []
    found: dict = {}
    for _, s in sync.iterrows():
        cover = ops[(ops["rank"] == s["rank"]) & (ops["lane"] == s["lane"]) &
                    (ops["ts_ns"] <= s["ts_ns"]) &
                    (ops["ts_ns"] + ops["dur_ns"] >= s["ts_ns"] + s["dur_ns"])]
        if not len(cover):
            continue
        inner = cover.loc[cover["ts_ns"].idxmax()]
        text = str(inner["detail"]).split("stack: ", 1)[1].split(" · ")[0]
        found[text] = found.get(text, 0) + 1
    return sorted(found.items(), key=lambda kv: -kv[1])


def eager_start(run) -> list[Suggestion]:
    """The step ran eagerly: compile it first (on CPU ranks too: inductor fuses elementwise
    chains into loops there as into kernels on a GPU). Score 0.6: a first move, below a
    measured wait larger than that."""
    cfg = run.config
    if cfg is None or cfg.compile != "off" or cfg.cudagraph != "off" or not len(run.summary):
        return []
    if any(isinstance(m, dict) and m.get("own_step") for m in run.ranks.values()):
        return []     # a step function of your own compiles what it passes to ctx.compile
    ops = _ops_per_step(run)
    ds = diagnose(run)
    d = worst(ds)
    what = (f"{ops:.0f} operators a profiled step, each its own pass over memory"
            if ops == ops else "every operator runs on its own")
    if d is not None and d.device == "gpu" and d.kernels == d.kernels:
        what = (f"{d.kernels:.0f} kernels a profiled step, {d.kernel_us:.3g} us each on "
                "average, launched one by one")
    return [Suggestion(
        rule="eager", title="Compile the model (torch.compile)",
        change={"compile": "default"},
        evidence=f"the step ran eagerly (compile='off'): {what}",
        why=("torch.compile traces the model once and generates fused code: chains of "
             "elementwise operators become one kernel (one loop on a CPU), with fewer "
             "launches and fewer passes over memory; it costs a compile first."),
        code="model = torch.compile(model)",
        cost=ab_cost("a compile, then"), about="eager", score=0.6,
        ranks=tuple(int(r) for r in run.summary["rank"]))]


def _ops_per_step(run) -> float:
    ev = run.events
    if ev is None or not len(ev):
        return math.nan
    cpu = ev[(ev["category"] == "cpu_op") & (ev["step"] >= 0)]
    steps = cpu.groupby(["rank", "step"], observed=True).size()
    return float(steps.median()) if len(steps) else math.nan


def larger_batch(run) -> list[Suggestion]:
    """A GPU rank with room in memory (peak below 40 % of the device) whose step idles at
    least 30 %, computes under half of it, keeps under half of the SMs active (NVML GPM,
    over the measured steps) or serves a model (forward only): a larger batch does more
    work per launch and per host step. Judged by items per second (a larger batch's step
    is longer). For the built-in scenarios and a Workload that takes its size (any other
    Workload's batch function fixes its size: the code says so).
    Score: the idle share, at most 0.5 (a different workload, not a faster same one)."""
    cfg, sm = run.config, run.summary
    if cfg is None or not len(sm) or not {"peak_mem_mb", "device_mem_mb"} <= set(sm.columns):
        return []
    gpu = sm[(sm.get("device") == "gpu") & (sm["device_mem_mb"] > 0)]
    if not len(gpu):
        return []
    mem = float((gpu["peak_mem_mb"] / gpu["device_mem_mb"]).max())
    ds = [d for d in diagnose(run) if d.device == "gpu"]
    d = worst(ds)
    busy = float(gpu["compute_busy_pct"].mean()) if "compute_busy_pct" in gpu else math.nan
    # NVML GPM: the share of SMs busy; low on a GPU that hardly idles means kernels too small
    # to fill it (a batch-4 GEMM on 132 SMs), which a larger batch fills at little extra time
    sm_pct = float(gpu["sm_active_pct"].mean()) if "sm_active_pct" in gpu else math.nan
    few_sms = sm_pct == sm_pct and sm_pct < SM_ACTIVE_PCT
    # a served model's batch is its throughput knob (a training batch also changes what is
    # learned): with memory to spare it is worth a screen, which drops it if items/s do not
    # rise; on 1 x H200 tp-mlp-infer's items/s doubled with each doubling from batch 8 to
    # 64 while the SMs read over half busy
    serving = not trains(run)
    if not (mem < MEMORY_SHARE and d is not None and (
            d.idle_share >= BOUND_SHARE or busy < 50 or few_sms or serving)):
        return []
    if "items_per_s" not in sm or not sm["items_per_s"].notna().any():
        return []
    # a Workload whose batch function takes its size reports it: the lab can double it
    sized = [m.get("batch_size") for m in run.ranks.values()
             if isinstance(m, dict) and m.get("batch_size")]
    custom = cfg.scenario == "custom" and not sized
    now = cfg.batch or (max(sized) if sized else None)
    if now is None and not custom:
        from nbtools.config.scenarios import scenario_spec
        now = scenario_spec(cfg.scenario).batch[1 if cfg.size != "small" else 0]
    change = {} if custom else {"batch": int(now) * 2}
    return [Suggestion(
        rule="larger-batch", title="Double the batch: more work per launch, judged by items/s",
        change=change,
        evidence=(f"peak memory {float(gpu['peak_mem_mb'].max()):,.0f} MB of "
                  f"{float(gpu['device_mem_mb'].max()):,.0f} MB ({_pct(mem)}), the GPU idle "
                  f"{_pct(d.idle_share)} of the profiled step, compute busy {busy:.0f} %"
                  + (f", the SMs active {sm_pct:.0f} % of the measured steps (NVML GPM): the "
                     "kernels fill a small part of the GPU" if few_sms else "")
                  + ("; a served model (forward only)" if serving else "")
                  + (f"; batch {now} now" if now else "")),
        why=(("Kernels that occupy a few of the SMs take about as long with more rows, "
              "so a larger batch fills the idle SMs at little extra time" if few_sms else
              "The host's work per step (launches, Python, hooks) hardly grows with the "
              "batch while the kernels' work does, so a larger batch keeps the GPU busier")
             + "; the step gets longer, so compare items per second, not step time."
             + ("" if serving else " In training a larger batch also changes the "
                "optimisation: scale the learning rate with it (linearly, with warm-up, is "
                "the usual start) and check the loss curve; items/s is not convergence.")),
        code=("# make your batch function return twice the samples, e.g.\n"
              "loader = DataLoader(dataset, batch_size=2 * batch_size, ...)\n"
              "# or give Workload(batch_size=N, batch=lambda step, device, size: ...) and "
              "the lab tries it"
              if custom else f"loader = DataLoader(dataset, batch_size={int(now) * 2})"),
        cost=ab_cost("") + "; compared on items_per_s", about="batch",
        score=min(0.5, d.idle_share), ranks=_ranks(ds), metric="items_per_s")]


def not_proposed(run) -> list:
    """[(move, why)] the diagnosis rules out for this run (shown with the suggestions)."""
    out = []
    ds = [d for d in diagnose(run) if d.bound == "host"]
    cfg = run.config
    if ds and fsdp_training(run) and cfg.compile not in CAPTURING_MODES:
        out.append(("compile='reduce-overhead' (CUDA graphs)", _NO_GRAPHS))
    return out


def _stretch(d) -> str:
    s = d.stretch_pct
    if s == s and s >= 20:
        return (f"; the profiler stretched this step by {s:.0f} % ({d.profiled_ms:.3g} ms "
                f"against {d.step_ms:.3g} ms unprofiled), so the host's share is overstated")
    return ""


RULES = (eager_start, cuda_graphs, host_fsdp, host_syncs, larger_batch)
