"""Kineto traces written by any PyTorch job -> a Run, the same object a lab's run gives."""
from __future__ import annotations

from nbtools.results.run import Run
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
    return Run(**read_traces(path, rank=rank, max_gb=max_gb, details=details))
