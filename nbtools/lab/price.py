"""What a run costs on this lab, from the runs already made: lab.explore prices each screen
and each proof with it before spending the budget on them.

A run's wall time is its engines' warm-up, measured and profiled steps plus the lab's round
trip, and, the first time a config runs on these engines, its compile (later runs of it find
the graphs in the compile cache on disk, even after a cache='fresh' reset). So a config's
price is the median wall of its warm runs; before it has any, its first run's wall less the
compile seconds that run measured; a config not run yet is priced as the config it is
compared with, plus a compile when it compiles what that one did not (the measured compile
of a config that compiled, else COMPILE_PRIOR_S, said as an assumption). A cold start run's
wall is never the price of the runs after it (issue 43: 163 s cold, 12 s warm)."""
from __future__ import annotations

import math
import statistics

COMPILE_PRIOR_S = 30.0
"""The compile of a config whose like has not compiled on this lab yet: a prior, not a
measurement (a small model compiles in 5-30 s on 2 CPU cores; a Llama's per-block compile
took 30-130 s on 1 x H200, docs/findings.md), replaced by what the screen measures. Too low
for a large model, it costs one run past the budget at most: no later run is priced with it."""
_COMPILE_FIELDS = ("compile", "backend", "dynamic", "fullgraph", "fsdp_compile", "ddp_wrap",
                   "optimize_ddp", "optimizer_impl", "autocast", "autocast_scope",
                   "cudagraph", "batch", "seq_len")


def key(workload, cfg) -> tuple:
    """What a price is kept under: the workload and the config, profiled steps aside (a
    screen runs its configs unprofiled)."""
    return (id(workload) if workload is not None else None, cfg.replace(profiled=0))


class Prices:
    """Wall seconds of the runs made so far, by config (``key``)."""

    def __init__(self):
        self.walls: dict = {}        # key -> [wall s of each run, in order]
        self.compile_s: dict = {}    # key -> compile s its first run measured

    def record(self, k, wall_s: float, run=None) -> None:
        """One run's wall seconds (and, for a config's first run, its compile seconds)."""
        first = k not in self.walls
        self.walls.setdefault(k, []).append(float(wall_s))
        if first:
            self.compile_s[k] = _compile_s(run)

    def warm(self, k) -> float | None:
        """A warm run of ``k``: the median of its runs after the first, else its first
        run's wall less the compile it measured; None when it never ran."""
        w = self.walls.get(k)
        if not w:
            return None
        if len(w) > 1:
            return statistics.median(w[1:])
        return max(w[0] - self.compile_s.get(k, 0.0), 0.0)

    def run_s(self, k, like) -> tuple[float, str]:
        """(seconds, how it was priced) of ``k``'s next run, priced as ``like`` where ``k``
        never ran, plus its compile when it is new and compiles differently."""
        w = self.warm(k)
        if w is not None:
            return w, "measured"
        base = self.warm(like) or 0.0
        extra, how = self.compile_estimate(k, like)
        return base + extra, f"as its A{how}"

    def compile_estimate(self, k, like) -> tuple[float, str]:
        """(seconds, words) of the compile ``k``'s first run will pay."""
        if k in self.walls:
            return 0.0, ""
        cfg, base = k[1], like[1]
        if not compiles_differently(cfg, base):
            return 0.0, ""
        measured = [s for kk, s in self.compile_s.items() if s > 0 and kk[1].compiled]
        if measured:
            return max(measured), f" + a compile ({max(measured):.0f} s, as measured here)"
        return COMPILE_PRIOR_S, (f" + a compile (not measured yet on this lab: "
                                 f"{COMPILE_PRIOR_S:.0f} s assumed)")

    def screen_s(self, a, b) -> tuple[float, str]:
        """A screen round, A B B A: (seconds, how priced)."""
        sa, _ = self.run_s(a, a)
        sb, how = self.run_s(b, a)
        warm_b = self.warm(b) if self.warm(b) is not None else sa
        return 2 * sa + sb + warm_b, f"B {how}"

    def round_s(self, a, b) -> float:
        """A proof round of warm runs, A B B A."""
        sa = self.warm(a) or 0.0
        sb = self.warm(b)
        return 2 * sa + 2 * (sb if sb is not None else sa)

    def longest_run(self, *keys) -> float:
        """The longest warm run of these configs (the next run of a round can be any)."""
        vals = [self.warm(k) for k in keys]
        vals = [v for v in vals if v is not None]
        return max(vals) if vals else 0.0


def _compile_s(run) -> float:
    if run is None or not len(run.summary) or "compile_s" not in run.summary:
        return 0.0
    v = float(run.summary["compile_s"].max())
    return v if math.isfinite(v) else 0.0


def compiles_differently(cfg, base) -> bool:
    """``cfg`` compiles something ``base`` does not, or compiles it another way."""
    if not cfg.compiled and cfg.optimizer_impl != "compiled":
        return False
    return any(getattr(cfg, f) != getattr(base, f) for f in _COMPILE_FIELDS)
