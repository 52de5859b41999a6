"""lab.explore's last A/B: where more than one change was kept, each was proven against the
best before it, so no A/B has yet measured the best against the start. One more A/B (a few
rounds of warm runs, priced first) does, and its verdict is the exploration's."""
from __future__ import annotations

from dataclasses import replace

from nbtools.lab import ab as ab_rounds
from nbtools.lab import price

ROUNDS = 3
"""Rounds of the start-against-best A/B: both sides are warm and the gap is the sum of the
kept changes, so a few rounds resolve it."""


def overall(lab, ex, opts, prices, budget, say) -> None:
    """After lab.explore's loop over ``ex`` (its A/B ``opts``, ``prices`` and ``budget``;
    ``say``: the live line's): runs start against best when 2 or more changes were kept
    and the budget holds its rounds; records the Comparison as ``ex.overall`` (or why not,
    as ``ex.overall_note``)."""
    if len(ex.kept) < 2 or ex.note:
        return
    if opts.stop is not None and opts.stop.is_set():
        ex.overall_note = "start against best not measured: stopped before its A/B"
        return
    ka, kb = price.key(ex.workload, ex.start), price.key(ex.best_workload, ex.best)
    per = prices.round_s(ka, kb) or prices.screen_s(ka, kb)[0]
    if not budget.fits(per * ROUNDS):
        ex.overall_note = (f"start against best not measured in one A/B: its {ROUNDS} rounds "
                           f"need ~{per * ROUNDS:.0f} s, {max(budget.left(), 0):.0f} s left")
        return
    side = (lambda wl, cfg: (wl, cfg) if wl is not None else cfg)
    metric = "items_per_s" if any(r.get("kept") and r.get("metric") == "items_per_s"
                                  for r in ex.rows) else "step_ms"
    say(f"explore: the start against the best ({len(ex.kept)} changes kept), {ROUNDS} rounds")
    # the person's timeout, bound and stop (the panel's Stop ends it between runs, its
    # finished rounds kept); its rounds are fixed, and its runs are no move of the table's,
    # so the callback the moves' A/Bs report to is left out
    o = replace(opts, rounds=ROUNDS, metric=metric, width=None, on_run=None)
    try:
        cmp = ab_rounds.run_ab(lab, side(ex.workload, ex.start), side(ex.best_workload, ex.best),
                               o)
    except Exception as e:  # noqa: BLE001 - the kept changes stand on their own A/Bs
        ex.overall_note = f"start against best not measured: {type(e).__name__}: {e}"[:300]
        return
    ex.overall = cmp
