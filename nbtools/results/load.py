"""Kineto traces written by any PyTorch job -> a Run, the same object a lab's run gives."""
from __future__ import annotations

import pandas as pd

from nbtools.analysis.breakdown import rank_table
from nbtools.analysis.step_metrics import step_times
from nbtools.results.run import Run
from nbtools.schema import tables
from nbtools.trace.load import read_traces
from nbtools.trace.read_json import MAX_GB, RankUnknown, TraceError  # noqa: F401  (users catch them here)

__all__ = ["TraceError", "load_traces"]


def load_traces(path, rank=None, max_gb: float = MAX_GB, details: bool = False) -> Run:
    """Kineto traces written by any PyTorch job -> a Run (source="traces").

    ``path``: a ``.json``/``.json.gz`` file, a folder of them, or a list of files/folders.
    The rank of a file is ``rank`` (single file only), else its ``distributedInfo.rank``,
    else a file name that says ``rank<N>``/``rank-N``/``rank_N``. Times are absolute epoch
    ns: ``ts`` (µs) plus ``baseTimeNanoseconds`` when the trace has it, else ``ts`` is epoch
    µs already (older traces); ``displayTimeUnit`` is a display hint and is ignored.
    Only whitelisted metadata (versions, devices, world size) reaches ``Run.env``: user
    names, host names and paths in traces stay behind.

    A damaged file is a TraceError saying what is wrong; damaged events (a timestamp that is
    not a number, a name that is a list, an id beyond int64) are dropped or kept with -1
    and counted in ``Run.flags``. ``max_gb`` caps a file's decompressed size.

    ``details=True`` also reads the events' args for the timeline's tooltips (input shapes
    and bytes where the job ran with record_shapes; a collective's name, process group,
    ranks, element counts and dtype from NCCL kernels and record_param_comms): a second,
    slower pass over each file (the whole JSON in memory at once), so off by default."""
    fields = read_traces(path, rank=rank, max_gb=max_gb, details=details)
    events, damaged_cat = fields["events"], fields.pop("damaged_cat")
    ranges = step_times(events, spans=False)
    steps = profiled_steps(ranges)
    summary = rank_table(events, steps, _ranges=ranges)
    flags = fields["flags"]
    for r in summary.loc[summary["device"] == "cpu", "rank"]:
        # a damaged cat (5, null) cannot say GPU: then the cause is the damage, not the job
        cats = damaged_cat.get(int(r))
        flags.append(f"rank {r}: no GPU events (CPU-only trace): CPU-op busy is reported"
                     if not cats else f"rank {r}: no GPU events recognised: {cats} event(s) "
                     "have a cat that is not text, so their kind is unknown")
    flags += fields.pop("job_flags")
    return Run(steps=steps, summary=summary, **fields)


def profiled_steps(ranges: pd.DataFrame) -> pd.DataFrame:
    """STEP_COLUMNS rows (phase "profiled") from the step ranges a trace carries
    (``step_times(events, spans=False)``)."""
    return tables.from_columns({"rank": ranges["rank"], "step": ranges["step"],
                                "ts_ns": ranges["ts_ns"], "phase": ["profiled"] * len(ranges),
                                "dur_ns": ranges["dur_ns"]}, tables.STEP_COLUMNS)
