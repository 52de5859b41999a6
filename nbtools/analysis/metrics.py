"""Every summary column once: what it means, its unit, where tables show it, whether
higher is better, and how the ranks of a run combine into the run's one number.

Every surface reads this: the summary tables (header tooltips, key columns), the A/B
comparison (panel, notebook, report), ``table()`` of the sweeps, the CLI table and its
legend, the history. ``combine`` is the only place ranks become one number, so an A/B
pair shows the same numbers everywhere. Pure: pandas in, floats out; no torch, no bokeh.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class Metric:
    """One summary metric: its unit, where it is shown (``kind``), how ranks combine into
    the run's number, which way is better and its short label. Every surface reads these."""
    name: str
    unit: str        # "ms", "s", "µs", "%", "MB", "/s", "" ...
    kind: str        # "key" (shown first), "more" (behind the details toggle), "gpu" (GPU
                     # ranks only: hidden when every rank ran on CPU), "gpukey" (GPU only, first)
    combine: str     # over ranks: "max", "min", "mean", "rate" (see combine), "" (a label)
    better: str      # "lower", "higher", "" (neither: a description, not a goal)
    text: str        # the explanation (tooltips, legends)
    short: str = ""  # the header in narrow tables (the CLI); the name when empty
    weight: str = ""         # "mean" only: the column weighting each rank
    tp_shared: bool = False  # "rate" only: under tp every rank reports the same items
    stat: str = ""           # the statistic over steps a table header names ("median",
                             # "mean") where two columns of one step differ by it

    @property
    def label(self) -> str:
        """The short column label, else the metric's name."""
        return self.short or self.name

    @property
    def count(self) -> bool:
        """A whole number of things (printed as 3, not 3.0)."""
        return self.unit == "" and self.combine == "max" and self.name != "check_max_rel"


def _m(name, unit, kind, combine, better, text, **kw) -> Metric:
    return Metric(name, unit, kind, combine, better, text, **kw)


# Why each combine:
# - max for step times: a distributed step ends when its slowest rank does (the others wait
#   in the collectives), so the slowest rank's time is the run's. For compile time: the ranks
#   compile side by side and the run is ready when the last one is. For counts: the ranks
#   normally compile the same graphs, and a recompile or break on any rank is the run's
#   (a sum would multiply them by the world size). For memory: the rank nearest its limit
#   is the one that runs out. wait_ms / last_pct: the straggler itself waits 0 and the
#   shares of "arrived last" add up to 100 over ranks, so a mean only dilutes them with the
#   world size; the largest says how much the waiting rank lost and how often one rank was late.
# - mean for the breakdown of a step (compute_ms, comm_ms, exposed_comm_ms, idle_ms, memcpy_ms)
#   and the window they are parts of (profiled_window_ms: the mean of sums is the sum of means,
#   so the run's parts still fit in the run's window)
#   and the busy shares: one rank's components add up to its step; the max of each taken
#   separately mixes ranks (the straggler has the most compute, its peers the most exposed
#   communication) into a step no rank ran, with exposed_comm_ms above comm_ms. The mean
#   rank's breakdown still adds up. Shares of a span (busy %, coverage %) have about the
#   same denominator on every rank of one job, so their mean is the job's share; overlap_pct
#   is a share of communication time, which differs between ranks, so it is weighted by
#   comm_ms: the share of all the run's communication that overlapped.
# - rate for throughput (items_per_s, tflops; per rank: that rank's items or FLOPs per step
#   over its own step_ms, analysis/summary.py). ddp, fsdp2: each rank processes its own
#   batch and the ranks step together, so the run does the sum of the ranks' work per step
#   in the slowest rank's step time (summing the ranks' own rates would count a rank's
#   shorter median as extra throughput it cannot have while it waits for the others). tp:
#   the ranks process the same batch (items counted once) and each does its share of the
#   FLOPs (the engine divides them by the world size), again in the slowest rank's step.
#   none: the ranks run independently, nobody waits for anybody, and their rates add up.
_ALL = (
    _m("rank", "", "key", "", "", "torch.distributed rank (one engine, one GPU or a share of "
       "the CPU)"),
    _m("step_ms", "ms", "key", "max", "lower", "median time of the measured (unprofiled) steps",
       stat="median"),
    _m("p10_ms", "ms", "more", "max", "lower", "10th percentile of the measured steps' time",
       short="p10"),
    _m("p90_ms", "ms", "key", "max", "lower", "90th percentile of the measured steps' time: "
       "the slow steps", short="p90"),
    _m("profiled_step_ms", "ms", "more", "max", "lower", "median time of the profiled steps "
       "(a median: the parts per profiled step are means, and fit in profiled_window_ms)",
       stat="median"),
    _m("profiler_overhead_pct", "%", "key", "max", "lower", "how much slower the profiled "
       "steps were than the measured ones; shown only when larger than the steps' own spread "
       "(profiler_noise_pct), else 'within noise'"),
    _m("profiler_noise_pct", "%", "more", "max", "lower", "half the p10-p90 spread of the "
       "measured (and profiled) steps, relative to step_ms: differences smaller than this "
       "are noise"),
    _m("compile_s", "s", "key", "max", "lower", "wall seconds spent compiling in this run "
       "(Dynamo + backend, forward and backward; a compile nested in another counts once), "
       "per rank; the run's is the slowest rank's, not a sum: the ranks compile side by side"),
    _m("compiles", "", "more", "max", "", "graphs compiled in this run (first compiles and "
       "recompiles)"),
    _m("recompiles", "", "key", "max", "lower", "compiles caused by a failed guard (a new "
       "shape, dtype, ...)", short="recomp"),
    _m("graph_breaks", "", "key", "max", "lower", "places where Dynamo stopped tracing and fell "
       "back to Python"),
    _m("graphs", "", "more", "max", "", "graphs compiled in this run (0 when the run reused "
       "compiled state: see compile_state)"),
    _m("compile_state", "", "key", "", "", "what the compile did in this run, as the engine "
       "saw it: compiled, reused (graphs compiled by an earlier run ran), eager (compile on, "
       "nothing compiled or ran), off"),
    _m("wait_ms", "ms", "more", "max", "lower", "time per profiled step this rank waited in "
       "collectives for the last-arriving rank (median over steps)"),
    _m("last_pct", "%", "more", "max", "", "share of the matched collectives this rank arrived "
       "at last"),
    _m("cudagraph_skips", "", "gpu", "max", "lower", "compiled graphs the CUDA-graph trees "
       "refused to capture"),
    _m("peak_mem_mb", "MB", "gpukey", "max", "lower", "peak GPU memory allocated by PyTorch on "
       "this rank", short="peak_MB"),
    _m("device_mem_mb", "MB", "gpu", "min", "", "the device's memory (GPU ranks): what "
       "peak_mem_mb is a share of"),
    _m("graph_pool_mb", "MB", "gpu", "max", "lower", "GPU memory held by CUDA-graph private "
       "pools at the run's end (StepConfig(memory=True))", short="pool_MB"),
    _m("rss_mb", "MB", "more", "max", "lower", "the engine process's resident memory (all of "
       "PyTorch, compiled code and caches, not only the model)"),
    _m("check_max_rel", "", "more", "max", "lower", "compiled vs eager first step: largest "
       "difference, relative to eager's largest value (check=True)"),
    _m("items_per_s", "/s", "key", "rate", "higher", "samples (or real tokens) per second at "
       "step_ms", short="items/s", tp_shared=True),
    _m("tflops", "TFLOP/s", "more", "rate", "higher", "the model's FLOPs per step over step_ms"),
    _m("gpu_busy_pct", "%", "gpu", "mean", "", "share of the step's GPU span with any kernel "
       "or copy running (NCCL kernels waiting for peers count as busy)"),
    _m("compute_busy_pct", "%", "key", "mean", "higher", "share of the busy span (first to "
       "last kernel, or operator on CPU ranks) with compute running (cbusy% in the CLI)",
       short="cbusy%"),
    _m("profiled_window_ms", "ms", "key", "mean", "lower", "the profiled step the parts "
       "(compute_ms, comm_ms, exposed_comm_ms, idle_ms) are measured in: mean over the "
       "profiled steps of the step range, widened to the end of the step's own GPU work; "
       "compute_ms + exposed_comm_ms + idle_ms fit inside it", short="window_ms", stat="mean"),
    _m("compute_ms", "ms", "more", "mean", "lower", "compute time per profiled step (mean over "
       "the profiled steps, each measured inside its step; streams overlapping count once)"),
    _m("comm_ms", "ms", "more", "mean", "lower", "communication time per profiled step (NCCL "
       "kernels on GPU, gloo collectives on CPU; mean over the profiled steps)"),
    _m("memcpy_ms", "ms", "gpu", "mean", "lower", "host/device copy time per profiled step"),
    _m("exposed_comm_ms", "ms", "key", "mean", "lower", "exposed communication: communication "
       "time per profiled step with no compute running beside it — what the step waits on "
       "(a part of comm_ms; shown beside profiled_window_ms, the step it is part of)"),
    _m("idle_ms", "ms", "more", "mean", "lower", "time per profiled step inside the busy span "
       "with nothing running (compute_ms + exposed_comm_ms + idle_ms <= profiled_window_ms)"),
    # why the GPU waited (analysis/idle.py: HolisticTraceAnalysis's idle time breakdown over
    # the rank's whole GPU), and where the host was while the GPU waited for it
    _m("host_wait_ms", "ms", "gpukey", "mean", "lower", "idle time per profiled step before a "
       "kernel the host had not launched yet: the host is the bottleneck (a part of idle_ms; "
       "run.why() says where the host was)", short="host_wait"),
    _m("kernel_wait_ms", "ms", "gpu", "mean", "lower", "idle time per profiled step shorter "
       "than 30 us between kernels already launched: the cost of starting kernels one by one "
       "(a part of idle_ms)"),
    _m("other_wait_ms", "ms", "gpu", "mean", "lower", "the rest of idle_ms: kernels launched "
       "in time that still waited (another stream's event, a peer, a device-side sync)"),
    *(_m(f"host_{c}_ms", "ms", "gpu", "mean", "lower", f"of host_wait_ms: time the launching "
         f"thread spent in {w}") for c, w in (
        ("compiling", "compiling (Dynamo and the backend: a recompile inside the step)"),
        ("sync", "host syncs (cudaStreamSynchronize, .item(), .cpu())"),
        ("launch", "kernel launch calls (the CUDA runtime)"),
        ("hooks", "FSDP/DDP hooks and collectives' host side"),
        ("optimizer", "the optimizer's step and zero_grad"),
        ("compiled", "calls into compiled graphs (guards, wrappers, cache lookups)"),
        ("autograd", "autograd's backward outside the above"),
        ("batch", "making the batch (a DataLoader)"),
        ("forward", "the model's forward and loss outside the above (its Python)"),
        ("other", "nothing the trace names (Python between ops)"))),
    _m("overlap_pct", "%", "key", "mean", "higher", "share of communication that ran while "
       "compute ran", short="overlap%", weight="comm_ms"),
    _m("graph_coverage_pct", "%", "gpukey", "mean", "higher", "share of kernel time launched "
       "by CUDA-graph replay (graph% in the CLI)", short="graph%"),
    _m("kernels", "", "gpu", "max", "", "GPU kernels in the profiled steps (0 on CPU ranks)"),
    _m("comm_kernels", "", "gpu", "max", "", "communication (NCCL) kernels in the profiled "
       "steps (0 on CPU ranks)"),
    _m("graph_kernels", "", "gpu", "max", "", "kernels launched by CUDA-graph replay"),
    # a per-rank median of how far the host runs ahead: neither end is the "worst" rank
    _m("queue_delay_us_median", "µs", "gpu", "mean", "", "median time from a kernel's launch "
       "on the CPU to its start on the GPU"),
    _m("syncs", "", "more", "max", "lower", "host-side synchronisations per profiled step "
       "(cudaStreamSynchronize, cudaEventSynchronize, ...)"),
    _m("device", "", "more", "", "", "what the timeline columns measured: gpu (kernels) or cpu "
       "(operator ranges)"),
    _m("cpu_busy_pct", "%", "more", "mean", "", "share of the CPU span with an operator or "
       "collective running"),
    _m("annotated_steps", "", "more", "max", "", "profiled steps found as nbtools/step ranges"),
    _m("annotated_step_ms", "ms", "more", "max", "lower", "median length of those step ranges",
       stat="median"),
    _m("host", "", "more", "", "", "the machine the rank ran on"),
    _m("cache", "", "more", "", "", "compile-cache policy: fresh (reset per config) or continue"),
    # the machine's state over the timed steps (engine/machine.py samples, analysis/machine.py)
    _m("host_load", "/core", "more", "max", "lower", "runnable tasks per core on the rank's host, "
       "mean over the timed steps of the tasks runnable at each sample (/proc/loadavg, not "
       "uptime's load average; the lab's own ranks count): above 1 a step's threads waited "
       "for a core; the run's is the busiest host's"),
    _m("sm_clock_mhz", "MHz", "gpu", "max", "higher", "median SM clock over the timed steps "
       "(NVML); the run's is the fastest rank's, read beside sm_clock_min_mhz", short="sm_MHz"),
    _m("sm_clock_min_mhz", "MHz", "gpu", "min", "higher", "lowest SM clock sampled in a timed "
       "step; the run's is the slowest rank's (a throttled rank slows every step)"),
    _m("sm_clock_max_mhz", "MHz", "gpu", "max", "", "the GPU's maximum SM clock (NVML)"),
    _m("gpu_temp_c", "°C", "gpu", "max", "lower", "hottest GPU temperature sampled over the "
       "timed steps"),
    _m("gpu_power_w", "W", "gpu", "max", "", "median GPU power draw over the timed steps"),
    _m("throttle", "", "gpu", "", "", "NVML's reasons for a clock below 90 % of its maximum "
       "during a timed step (power cap, thermal, ...); empty when none was low"),
    _m("clock_low_steps", "", "gpu", "", "", "the timed steps during which the SM clock was "
       "below 90 % of its maximum"),
    _m("gpu_other_procs", "", "gpu", "max", "lower", "processes on this rank's GPU besides "
       "its engine (NVML, before and after the timed steps)"),
    _m("gpu_index", "", "gpu", "", "", "the GPU's index as NVML and nvidia-smi number it"),
    # the signals sampled through the run (run.samples), read over the measured steps
    _m("gpu_util_pct", "%", "gpu", "mean", "", "GPU busy over the measured steps: mean of "
       "NVML's utilisation samples (share of each sample period in which a kernel ran) whose "
       "period lies inside the measured steps; the period is up to 1 s, so measured steps "
       "spanning less than a second have no reading (empty)"),
    _m("sm_active_pct", "%", "gpu", "mean", "", "share of the SMs busy over the measured steps "
       "(NVML GPM, Hopper and newer; readings whose 100 ms or more lie inside the measured "
       "steps, empty where those span less): low on a GPU that hardly idles means kernels "
       "too small to fill it"),
    _m("tensor_active_pct", "%", "gpu", "mean", "", "share of time the SMs ran tensor-core "
       "instructions over the measured steps (NVML GPM, read as sm_active_pct is): near 0 "
       "while matrix products dominate means they run on the CUDA cores (fp32 without TF32)"),
    _m("dram_bw_pct", "%", "gpu", "mean", "", "DRAM bandwidth used over the measured steps, "
       "of the card's peak (NVML GPM, read as sm_active_pct is): high with the SMs "
       "half idle is a step bound by memory traffic"),
    _m("cpu_pct", "%", "more", "mean", "", "CPU of the rank's process over the measured "
       "steps (all its threads; 100 = one core busy): about 100 with the GPU idle means "
       "the step waits on its Python thread (host-bound)"),
    _m("host_cpu_pct", "%", "more", "max", "lower", "share of all the host's cores busy over "
       "the measured steps (/proc/stat, every process counted); the run's is the busiest "
       "host's"),
    _m("host_other_cores", "cores", "more", "max", "lower", "cores of the rank's host that "
       "processes other than the lab's ranks kept busy over the measured steps (host_cpu_pct "
       "less the ranks' cpu_pct): what disturbs the steps, the ranks' own load left out"),
    _m("host_cores", "", "more", "max", "", "cores of the rank's host"),
    _m("throttle_seen", "", "gpu", "", "", "throttling reasons NVML reported while the "
       "measured steps ran (power cap, thermal or hardware slowdown, power brake)"),
    _m("throttle_steps", "", "gpu", "", "", "the measured steps during which NVML reported a "
       "throttling reason"),
    _m("sm_clock_drop_pct", "%", "gpu", "max", "lower", "how far the SM clock fell within "
       "the measured steps, below the highest it read in them"),
    _m("clock_drop_steps", "", "gpu", "", "", "the measured steps that ran on a clock 5 % or "
       "more below the highest of the measured steps"),
    # table()'s token columns (analysis/counts.py tokens_per_s; per rank, then combined here)
    _m("tokens_per_s", "/s", "more", "rate", "higher", "real (unpadded) tokens per second: "
       "summed tokens over summed measured step time, recompiles inside the steps included",
       tp_shared=True),
    _m("steady_tokens_per_s", "/s", "more", "rate", "higher", "real tokens per step over the "
       "median step time: what a step costs once compiled", tp_shared=True),
    _m("padding_pct", "%", "more", "mean", "lower", "share of the inputs' tokens that were "
       "padding"),
)
METRICS: dict = {m.name: m for m in _ALL}

# Which metrics each surface lists, in this order. Rows a run lacks (NaN on both sides of a
# comparison, GPU-only numbers on CPU ranks) are left out where the surface shows them.
COMPARED = ("step_ms", "p90_ms", "items_per_s", "tflops", "compile_s", "compiles",
            "recompiles", "graph_breaks", "graphs", "gpu_busy_pct", "compute_busy_pct",
            "cpu_busy_pct", "profiled_window_ms", "compute_ms", "comm_ms", "exposed_comm_ms",
            "idle_ms", "overlap_pct", "graph_coverage_pct", "wait_ms", "peak_mem_mb",
            "graph_pool_mb", "rss_mb")
"""A/B comparison: Comparison.table, the panel, a notebook cell, the report."""
TABLE = ("step_ms", "p90_ms", "items_per_s", "compile_s", "compiles", "recompiles",
         "graph_breaks", "graphs", "profiled_window_ms", "compute_ms", "comm_ms",
         "exposed_comm_ms", "overlap_pct",
         "compute_busy_pct", "gpu_busy_pct", "cpu_busy_pct", "graph_coverage_pct", "peak_mem_mb")
"""``table(runs)``'s default columns (one row per run)."""
CLI = ("step_ms", "p10_ms", "p90_ms", "items_per_s", "compile_s", "recompiles", "graphs",
       "compute_busy_pct", "overlap_pct", "graph_coverage_pct", "peak_mem_mb")
"""The CLI table (``python -m nbtools run|demo|view``)."""
TRACE_CLI = ("profiled_window_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "idle_ms",
             "host_wait_ms", "compute_busy_pct", "overlap_pct", "graph_coverage_pct")
"""The CLI table of traces from a person's own job (``python -m nbtools view TRACES``): no
lab timed their steps, so the profiled step and its parts instead of step_ms and the rest."""
HISTORY = ("step_ms", "recompiles")
"""``lab.history.table``, beside id, status and label."""

# A whole and its parts: wherever a table shows a part, the whole it fits in stands first,
# the parts right after it (ddp-train on CPU: compute + exposed + idle read above the
# profiled steps' median shown beside them in 17 of 20 rank rows; a median is not the
# whole of means).
# Nested: idle_ms is a part of the window and the whole of the GPU's waits (analysis/idle.py),
# host_wait_ms the whole of where the host was; outer wholes first.
PARTS_OF = {"profiled_window_ms": ("compute_ms", "comm_ms", "memcpy_ms", "exposed_comm_ms",
                                   "idle_ms"),
            "idle_ms": ("host_wait_ms", "kernel_wait_ms", "other_wait_ms"),
            "host_wait_ms": tuple(m.name for m in _ALL if m.name.startswith("host_")
                                  and m.name.endswith("_ms") and m.name != "host_wait_ms")}


def beside_whole(columns, available=None) -> list:
    """``columns`` with each whole (PARTS_OF) right before its parts (in the registry's
    order), where the whole stood, else where its first part stood; a whole missing from
    ``columns`` is added when ``available`` (the table's columns) has it."""
    cols = list(columns)
    for whole, parts in reversed(PARTS_OF.items()):     # the missing wholes, inner first
        present = [c for c in cols if c in parts]
        if present and whole not in cols and whole in (available or ()):
            cols.insert(min(cols.index(c) for c in present), whole)
    for whole, parts in PARTS_OF.items():               # each whole, then its parts
        present = [c for c in cols if c in parts]
        if not present or whole not in cols:
            continue
        at = cols.index(whole)
        rest = [c for c in cols if c != whole and c not in parts]
        head = sum(1 for c in cols[:at] if c != whole and c not in parts)
        cols = rest[:head] + [whole] + [p for p in parts if p in present] + rest[head:]
    return cols


# Short headers (the CLI's) to the column they stand for.
ABBREVIATIONS = {m.short: m.name for m in _ALL if m.short}

_HOW = {"max": "the largest over ranks",
        "min": "the smallest over ranks",
        "mean": "the mean over ranks",
        "rate": "every rank's work per step (one rank's items under tp, whose ranks share a "
                "batch) over the slowest rank's step_ms; under parallel=none, whose ranks do "
                "not wait for each other, the sum of the ranks' rates"}


def combine(summary: pd.DataFrame, metric: str, config=None) -> float:
    """The run's one number for ``metric`` from its per-rank ``summary`` (NaN when no rank
    has it). ``config`` (the run's StepConfig, or None) says the parallel strategy, which
    decides how throughput adds up (rate metrics); without it the ranks are taken to be
    data parallel, the default of most scenarios. A column the registry does not know is
    averaged; a label (compile_state, device, host) is NaN."""
    if summary is None or not len(summary) or metric not in summary:
        return math.nan
    m = METRICS.get(metric)
    rule = m.combine if m is not None else "mean"
    if rule == "":
        return math.nan
    v = pd.to_numeric(summary[metric], errors="coerce")
    if rule == "max":
        return float(v.max())
    if rule == "min":
        return float(v.min())
    if rule == "mean":
        if m is not None and m.weight and m.weight in summary:
            w = pd.to_numeric(summary[m.weight], errors="coerce")
            ok = v.notna() & w.notna()
            if w[ok].sum() > 0:
                return float((v[ok] * w[ok]).sum() / w[ok].sum())
        return float(v.mean())
    return _rate(summary, v, m, getattr(config, "resolved_parallel", None))


def _rate(summary, v: pd.Series, m: Metric, parallel) -> float:
    if parallel == "none":
        return float(v.sum(min_count=1))
    step = combine(summary, "step_ms")          # the run's: its slowest rank's
    if not step > 0:
        return math.nan
    own = pd.to_numeric(summary["step_ms"], errors="coerce")
    ok = v.notna() & own.notna()
    if not ok.any():
        return math.nan
    work = v[ok] * own[ok]                 # per rank: items (or FLOPs) per step, x 1e3
    per_step = work.mean() if parallel == "tp" and m.tp_shared else work.sum()
    return float(per_step / step)


def how(metric: str) -> str:
    """How the ranks combine into the run's number, in words ('' for a label)."""
    m = METRICS.get(metric)
    if m is None:
        return _HOW["mean"]
    return _HOW.get(m.combine, "") + (f", weighted by {m.weight}" if m.weight else "")


def explain(column: str) -> str:
    """One line for a column or abbreviation; '' when unknown."""
    column = ABBREVIATIONS.get(column, column)
    m = METRICS.get(column)
    if m is None:
        return ""
    return f"{column}{f' ({m.unit})' if m.unit else ''}: {m.text}"


def unit(column: str) -> str:
    """The unit of a summary column ("" for one the registry does not know)."""
    m = METRICS.get(column)
    return m.unit if m else ""


def kind(column: str) -> str:
    """Where a column is shown: key, more, gpu or gpukey ("more" for unknown columns)."""
    m = METRICS.get(column)
    return m.kind if m else "more"


def better(column: str) -> str:
    """"lower", "higher", or "" when the metric describes rather than aims."""
    m = METRICS.get(column)
    return m.better if m else ""


def is_count(column: str) -> bool:
    """True for a metric that counts things (recompiles, graph breaks): shown as an integer."""
    m = METRICS.get(column)
    return bool(m and m.count)


def legend(columns) -> str:
    """Plain-text legend for a table's columns (the CLI prints it under its table)."""
    return "\n".join(line for line in (explain(c) for c in columns) if line)
