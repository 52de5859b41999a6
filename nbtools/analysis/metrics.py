"""What every summary column (and every abbreviation a table uses) means, once.

The panel, the HTML report, ``run`` in a notebook and the CLI legend all read this: a
column explained in one place is explained the same everywhere. Pure data, no imports.

Each entry: column -> (unit, kind, text). unit: "ms", "s", "µs", "%", "MB", "" ...;
kind: "key" (shown first), "more" (behind the details toggle), "gpu" (GPU ranks only:
hidden when every rank ran on CPU, where it is empty or always 0; else with the rest),
"gpukey" (GPU ranks only, and then shown first).
"""
from __future__ import annotations

GLOSSARY: dict = {
    "rank": ("", "key", "torch.distributed rank (one engine, one GPU or a share of the CPU)"),
    "step_ms": ("ms", "key", "median time of the measured (unprofiled) steps"),
    "p10_ms": ("ms", "more", "10th percentile of the measured steps' time"),
    "p90_ms": ("ms", "key", "90th percentile of the measured steps' time: the slow steps"),
    "profiled_step_ms": ("ms", "more", "median time of the profiled steps"),
    "profiler_overhead_pct": ("%", "key", "how much slower the profiled steps were than "
                              "the measured ones; shown only when larger than the steps' own "
                              "spread (profiler_noise_pct), else 'within noise'"),
    "profiler_noise_pct": ("%", "more", "half the p10-p90 spread of the measured (and "
                           "profiled) steps, relative to step_ms: differences smaller than "
                           "this are noise"),
    "compile_s": ("s", "key", "seconds spent compiling in this run (Dynamo + backend, "
                  "forward and backward), per rank"),
    "compiles": ("", "more", "graphs compiled in this run (first compiles and recompiles)"),
    "recompiles": ("", "key", "compiles caused by a failed guard (a new shape, dtype, ...)"),
    "graph_breaks": ("", "key", "places where Dynamo stopped tracing and fell back to Python"),
    "graphs": ("", "more", "graphs compiled in this run (0 when the run reused compiled state: "
               "see compile_state)"),
    "compile_state": ("", "key", "what the compile did in this run, as the engine saw it: "
                      "compiled, reused (graphs compiled by an earlier run ran), eager "
                      "(compile on, nothing compiled or ran), off"),
    "wait_ms": ("ms", "more", "time per profiled step this rank waited in collectives for the "
                "last-arriving rank (median over steps)"),
    "last_pct": ("%", "more", "share of the matched collectives this rank arrived at last"),
    "cudagraph_skips": ("", "gpu", "compiled graphs the CUDA-graph trees refused to capture"),
    "peak_mem_mb": ("MB", "gpukey", "peak GPU memory allocated by PyTorch on this rank"),
    "rss_mb": ("MB", "more", "the engine process's resident memory (all of PyTorch, compiled "
               "code and caches, not only the model)"),
    "check_max_rel": ("", "more", "compiled vs eager first step: largest difference, "
                      "relative to eager's largest value (check=True)"),
    "items_per_s": ("/s", "key", "samples (or real tokens) per second at step_ms"),
    "tflops": ("TFLOP/s", "more", "the model's FLOPs per step over step_ms"),
    "gpu_busy_pct": ("%", "gpu", "share of the step's GPU span with any kernel or copy "
                     "running (NCCL kernels waiting for peers count as busy)"),
    "compute_busy_pct": ("%", "key", "share of the busy span (first to last kernel, or "
                         "operator on CPU ranks) with compute running (cbusy% in the CLI)"),
    "compute_ms": ("ms", "more", "compute time per profiled step"),
    "comm_ms": ("ms", "more", "communication time per profiled step (NCCL kernels on GPU, "
                "gloo collectives on CPU)"),
    "memcpy_ms": ("ms", "gpu", "host/device copy time per profiled step"),
    "overlap_pct": ("%", "key", "share of communication that ran while compute ran"),
    "exposed_comm_ms": ("ms", "key", "exposed communication: communication time per profiled "
                        "step with no compute running beside it — what the step waits on"),
    "idle_ms": ("ms", "more", "time per profiled step inside the busy span with nothing "
                "running"),
    "graph_coverage_pct": ("%", "gpukey", "share of kernel time launched by CUDA-graph replay "
                           "(graph% in the CLI)"),
    "kernels": ("", "gpu", "kernels (GPU) or operator ranges (CPU) in the profiled steps"),
    "comm_kernels": ("", "gpu", "communication kernels / collectives in the profiled steps"),
    "graph_kernels": ("", "gpu", "kernels launched by CUDA-graph replay"),
    "queue_delay_us_median": ("µs", "gpu", "median time from a kernel's launch on the CPU "
                              "to its start on the GPU"),
    "syncs": ("", "more", "host-side synchronisations per profiled step (cudaStreamSynchronize, "
              "cudaEventSynchronize, ...)"),
    "device": ("", "more", "what the timeline columns measured: gpu (kernels) or cpu "
               "(operator ranges)"),
    "cpu_busy_pct": ("%", "more", "share of the CPU span with an operator or collective "
                     "running"),
    "annotated_steps": ("", "more", "profiled steps found as nbtools/step ranges"),
    "annotated_step_ms": ("ms", "more", "median length of those step ranges"),
    "host": ("", "more", "the machine the rank ran on"),
    "cache": ("", "more", "compile-cache policy: fresh (reset per config) or continue"),
}

# Abbreviations used in headers elsewhere (the CLI table), to the column they stand for.
ABBREVIATIONS = {"cbusy%": "compute_busy_pct", "graph%": "graph_coverage_pct",
                 "overlap%": "overlap_pct", "recomp": "recompiles", "peak_MB": "peak_mem_mb",
                 "p10": "p10_ms", "p90": "p90_ms"}


def explain(column: str) -> str:
    """One line for a column or abbreviation; '' when unknown."""
    column = ABBREVIATIONS.get(column, column)
    entry = GLOSSARY.get(column)
    if entry is None:
        return ""
    unit, _, text = entry
    return f"{column}{f' ({unit})' if unit else ''}: {text}"


def unit(column: str) -> str:
    return GLOSSARY.get(column, ("", "", ""))[0]


def kind(column: str) -> str:
    return GLOSSARY.get(column, ("", "more", ""))[1]


def legend(columns) -> str:
    """Plain-text legend for a table's columns (the CLI prints it under its table)."""
    return "\n".join(line for line in (explain(c) for c in columns) if line)
