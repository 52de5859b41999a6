"""What torch recorded about a compile, read for the compile-event recorder
(compile_events.py): guarded access to torch internals (CompilationMetrics, counters, the
compile context, log state) and the text of PyTorch's log messages (guard-failure reasons,
the user's file:line, the short form of a reason).

Every access is guarded so a missing internal loses detail, not the run. Importing this
module does not import torch.
"""
from __future__ import annotations

import os
import re

_USER_AT = re.compile(r"in user code at (.+):(\d+)")
_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+)')
_STACK_ENTRY = re.compile(r"Line: (\d+), Name: (.*), Filename: (.*)")


# -- torch access, each guarded --------------------------------------------------------
def log_state():
    """torch._logging's live log state, re-read each time (TORCH_LOGS rebinds it); None
    where this torch has none."""
    try:
        from torch._logging import _internal
        return _internal.log_state   # rebound by _init_logs when TORCH_LOGS is set: re-read
    except (ImportError, AttributeError):
        return None


def compilation_metrics() -> list:
    """Dynamo's compilation metrics so far ([] where this torch does not keep them)."""
    try:
        from torch._dynamo.utils import get_compilation_metrics
        return get_compilation_metrics()
    except (ImportError, AttributeError):
        return []


def current_compile_id() -> str:
    """The compile id being compiled now (e.g. "0/1"), "" outside a compile."""
    try:
        from torch._guards import CompileContext
        cid = CompileContext.current_compile_id()
        return "" if cid is None else str(cid)
    except (ImportError, AttributeError):
        return ""


def callback_trigger(args) -> str:
    """What started a compile, by name, from a compile callback's arguments."""
    t = getattr(args, "callback_trigger", None)
    return getattr(t, "name", str(t))


def counter_snapshot() -> dict:
    """Dynamo's and inductor's counters now (graph breaks, unimplemented, unique graphs,
    CUDA-graph skips): the run reports the difference over its steps."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return {}
    return {"graph_break": dict(counters.get("graph_break", {})),
            "unimplemented": dict(counters.get("unimplemented", {})),
            "unique_graphs": counters.get("stats", {}).get("unique_graphs", 0),
            "cudagraph_skips": counters.get("inductor", {}).get("cudagraph_skips", 0)}


def frame_of(m) -> tuple:
    """(name, file:line) of a compiled frame. For a module whose forward lives in torch
    (nn.Sequential), Dynamo compiles a wrapper, `inner` in torch/_dynamo/external_utils.py:
    point at the user's call site instead."""
    name, file, line = m.co_name or "", m.co_filename or "", m.co_firstlineno or 0
    if name == "inner" and file.replace("\\", "/").endswith("_dynamo/external_utils.py"):
        name, torch_dir = "<torch.compile(module)>", os.path.dirname(os.path.dirname(file))
        for entry in reversed(getattr(m, "stack_trace", None) or []):
            s = _STACK_ENTRY.match(str(entry))
            if s and not s.group(3).startswith(torch_dir):
                return name, f"{s.group(3)}:{s.group(1)}"
    return name, f"{file}:{line}"


def compile_times(m) -> dict:
    """A compilation metric's times in ms: total, Dynamo's part, the backend's (inductor,
    codegen), and backward (0 here: ``fold_backward`` adds it)."""
    def ms(field):
        return round((getattr(m, field, None) or 0) / 1e3, 3)
    total = ms("duration_us")
    backend = ms("aot_autograd_cumulative_compile_time_us") or \
        round((m.backend_compile_time_s or 0) * 1e3, 3)
    return {"total_ms": total, "dynamo_ms": round(max(0.0, total - backend), 3),
            "backend_ms": backend, "inductor_ms": ms("inductor_cumulative_compile_time_us"),
            "codegen_ms": ms("inductor_code_gen_cumulative_compile_time_us"), "bwd_ms": 0.0}


def cache_counts(m) -> tuple:
    """(hits, misses) of the FX-graph and AOTAutograd caches, local and remote, in one metric."""
    def total(kind):
        return sum(getattr(m, f"{c}_{where}_cache_{kind}_count", 0) or 0
                   for c in ("inductor_fx", "aotautograd") for where in ("local", "remote"))
    return total("hit"), total("miss")


def fold_backward(row, m):
    """Add a backward compile's time and cache counts to its forward's row (one row per frame)."""
    row["_times"]["bwd_ms"] = round(row["_times"]["bwd_ms"] + (m.duration_us or 0) / 1e3, 3)
    hits, misses = cache_counts(m)
    row["_cache"] = (row["_cache"][0] + hits, row["_cache"][1] + misses)


# -- text of PyTorch's messages --------------------------------------------------------
def parse_reasons(msg: str) -> list:
    """The '- 0/1: ...' lines of a recompiles (or recompiles_verbose) message."""
    out = []
    for line in msg.split("guard failure(s):", 1)[-1].splitlines():
        s = line.strip()
        if s.startswith("- "):
            out.append(s[2:].rstrip())
        elif s and out and not re.match(r"guard \d+ failures:", s):
            out[-1] += " " + s   # continuation of a multi-line reason (verbose form)
    return out


def user_frame(msg: str) -> str:
    """file:line of a graph break / skip: 'in user code at F:L', else the last 'File "F", line L'."""
    m = _USER_AT.search(msg)
    if m is None:
        found = list(_FILE_LINE.finditer(msg))
        m = found[-1] if found else None
    return f"{m.group(1)}:{m.group(2)}" if m else ""


def shorten(text, limit: int = 400) -> str:
    """First line, plus the Explanation line where PyTorch gives one."""
    lines = str(text or "").strip().splitlines()
    out = lines[0].strip() if lines else ""
    for line in lines[1:4]:
        if line.strip().startswith("Explanation:"):
            out += " — " + line.strip()[len("Explanation:"):].strip()
            break
    return out[:limit]


# -- did compiled code run? -------------------------------------------------------------
class FrameHits:
    """Counts entries into compiled frames: Dynamo calls its guard-complete hook each time
    a frame with compiled code is entered, with True when a cache entry's guards passed
    (the compiled code runs) and False when none did (recompile or eager fallback). One
    global hook: one set by someone else (set_enable_guard_collectives) is chained, and
    if it replaced ours mid-run the count is unknown (None) rather than wrong."""

    def __init__(self):
        self.hits = self.misses = 0
        self._prev = None
        self._lost = False

    def __call__(self, cache_hit: bool) -> bool:
        if cache_hit:
            self.hits += 1
        else:
            self.misses += 1
        return self._prev(cache_hit) if self._prev is not None else cache_hit

    def start(self) -> None:
        """Start counting guard hits and misses (zeroed), chaining any hook already set."""
        self.hits = self.misses = 0
        prev = _set_guard_hook(self)
        self._lost = prev is _UNAVAILABLE
        if prev is not self and not self._lost:
            self._prev = prev

    def read(self) -> tuple:
        """(hits, misses), or (None, None) where the hook could not be kept in place."""
        prev = _set_guard_hook(self)
        if self._lost or prev is not self:
            if prev is not self and prev is not _UNAVAILABLE:
                self._prev = prev
            return None, None
        return self.hits, self.misses


    def pause(self) -> bool:
        """Take the hook out for a while (the timed steps), keeping the counts; False when
        it was not ours to take out (then resume is not needed)."""
        prev = _set_guard_hook(self._prev)
        if prev is self:
            return True
        if prev is not _UNAVAILABLE:
            _set_guard_hook(prev)
        return False

    def resume(self) -> None:
        """Put the hook back after pause(), counts kept."""
        prev = _set_guard_hook(self)
        if prev is not self._prev and prev is not _UNAVAILABLE:
            self._lost = True       # someone replaced the hook meanwhile: the count is unknown

    def remove(self) -> None:
        """Put back the hook that was there before ours (if ours is still the one)."""
        prev = _set_guard_hook(self._prev)
        if prev is not self and prev is not _UNAVAILABLE:
            _set_guard_hook(prev)   # someone else's since: leave theirs
        self._prev = None


_UNAVAILABLE = object()


def _set_guard_hook(hook):
    try:
        from torch._C._dynamo.eval_frame import set_guard_complete_hook
        return set_guard_complete_hook(hook)
    except (ImportError, AttributeError, TypeError):
        return _UNAVAILABLE


def cached_graphs() -> int | None:
    """Compiled graphs that Dynamo's caches hold now: cache entries whose code calls a
    graph (``__compiled_fn_*``). A frame compiled around graph breaks with no ops in it has
    an entry too, which runs the original code: entries without a graph do not count."""
    try:
        from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list
        from torch._dynamo import convert_frame
        n = 0
        for ref in list(convert_frame.input_codes.seen):
            code = ref()
            if code is not None:
                n += sum(any(s.startswith("__compiled_fn") for s in e.code.co_names)
                         for e in _debug_get_cache_entry_list(code))
        return n
    except Exception:   # private API: the outcome then rests on this run's compiles alone
        return None
