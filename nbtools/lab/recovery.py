"""What a Lab does after a fault so the next run just works: see a dead engine from its
exit status, swap warm spares in for dead, hung or interrupted ranks and rejoin the
process group, re-create the group in place after an ordinary failure (gloo), and keep
a Ctrl-C'd run in the history as ``interrupted``.

Functions over a Lab (cluster.py keeps the lifecycle; this is its fault path).
"""
from __future__ import annotations

import os
import signal
import time

from nbtools.common.interrupts import held
from nbtools.engine import process_group
from nbtools.lab.assemble import assemble
from nbtools.lab.progress_view import say

# After a rank's engine died, how long its peers may still run: a peer blocked in a
# collective with a dead process does not come back (NCCL) or errors at once (gloo).
DEAD_GRACE_S = 1.0
# After Ctrl-C: how long the engines get to return from the interrupted step.
INTERRUPT_GRACE_S = 2.0
# After ipyparallel said an engine died: how long its process may take to finish exiting
# before the lab gives up on saying how (killed by SIGKILL, exit code 3).
EXIT_WAIT_S = 3.0


def dead_ranks(lab, ars: dict, known: dict, finished_too: bool = False) -> dict:
    """rank -> 'killed by SIGKILL' / 'exit code 3' for ranks whose engine process is gone
    (only engines this lab launched: their exit status, or their lifeline, is ours to read)."""
    if lab.pool is None and lab.hosts is None:
        return {}
    out = {}
    for r, ar in ars.items():
        if r in known or (ar.ready() and not finished_too):
            continue
        said_died = False
        if ar.ready():
            try:
                ar.get(0)
                continue        # it answered: whatever happened after is not this run's
            except Exception as e:
                said_died = "EngineError" in (getattr(e, "ename", None) or type(e).__name__)
        status = _status(lab, lab.rank_to_engine[r])
        # ipyparallel's nanny can report a killed engine before its process has finished
        # exiting (tearing down a large address space takes a while): wait for the status
        # that says how it died rather than show ipyparallel's "Engine 1 died"
        deadline = time.monotonic() + EXIT_WAIT_S
        while status is None and said_died and time.monotonic() < deadline:
            time.sleep(0.05)
            status = _status(lab, lab.rank_to_engine[r])
        if status is not None:
            out[r] = status
    return out


def gone(lab) -> set:
    """Ranks whose engine process has exited or that the controller no longer lists."""
    listed = set(lab.client.ids)
    out = set()
    for r, e in lab.rank_to_engine.items():
        if e not in listed or _status(lab, e) is not None:
            out.add(r)
    return out


def _status(lab, eid):
    """How this engine ended ('killed by SIGKILL', 'its process (pid 7 on node2) ended'),
    or None while it runs or when the lab cannot tell (engines it did not start)."""
    if lab.pool is not None:
        slot = lab.pool.by_engine(eid)
        return slot.exit_status() if slot is not None else None
    if lab.hosts is not None:
        return lab.hosts.dead(eid)
    return None


def _external_dead(lab) -> None:
    """Engines of a cluster this lab did not start cannot be restarted by it: say which
    host and engine went and how to bring them back, before anything else is stopped."""
    # the controller may still list a dead engine for a few heartbeats: the run already
    # said which ranks died (EngineError) or stopped answering
    where = {p.rank: p.host for p in lab.placements}
    names = ", ".join(f"rank {r} (engine {lab.rank_to_engine[r]} on {where.get(r, '?')})"
                      for r in sorted(lab._replace))
    raise RuntimeError(f"{names} died or stopped answering; this lab did not start its "
                       "cluster, so it cannot restart them: stop them and start as many "
                       "engines there again (for example cluster.start_engines_sync(n=...)), "
                       "then lab.restart(); the history is kept.")


def ready(lab) -> None:
    """before_run, whole: a Ctrl-C while engines are swapped or the group re-formed waits
    for the end (half a swap left ranks waiting in a group that never formed), then stops
    before the run starts. A third Ctrl-C abandons the repair: every rank is then swapped
    before the next run."""
    with held("the lab is being repaired after the last run's fault first") as h:
        try:
            before_run(lab)
        except KeyboardInterrupt:
            lab._replace |= set(lab.rank_to_engine)
            raise
        h.message = ("Ctrl-C while the lab was being repaired after the last run's fault: "
                     "it is ready; the run did not start")


def before_run(lab) -> None:
    """Bring the lab back after the previous run's fault, or fail saying why not."""
    if lab.client is None:
        raise RuntimeError("the lab is closed; start a new Lab() (history is on disk)")
    lab._replace |= gone(lab)     # an engine can also die between runs
    if lab.hosts is not None and lab._replace:
        lab.hosts.heal(lab._replace)     # raises one sentence when a host cannot
        lab._pg_broken, lab._replace = False, set()
        return
    if lab.needs_restart and lab._external is not None:
        _external_dead(lab)
    if lab.needs_restart:
        say(lab, "restarting the engines after the last run's fault")
        lab.restart()
        return
    if lab._replace or (lab._pg_broken and lab.device_type == "cuda"):
        # NCCL communicators were aborted: re-initialising them in place was not reliable
        # (H200, torch 2.11), so every rank gets a fresh (warm) engine
        ranks = set(lab.rank_to_engine) if lab.device_type == "cuda" else set(lab._replace)
        try:
            heal(lab, ranks)
        except Exception as e:
            say(lab, f"swapping in spare engines failed ({e}); restarting all engines")
            lab.restart()
            return
    elif lab._pg_broken:
        lab._on(list(lab.rank_to_engine.values()), process_group.reinit_pg)
    lab._pg_broken, lab._replace = False, set()


def heal(lab, ranks: set) -> float:
    """Replace these ranks' engines by spares and rejoin every rank in a new group."""
    t0 = time.perf_counter()
    if lab.pool is None:
        raise RuntimeError("engines not started by this lab cannot be replaced")
    ids = dict(lab.rank_to_engine)
    local = {p.rank: p.local_rank for p in lab.placements}
    lab.pool.retire([ids[r] for r in ranks])
    for r in sorted(ranks):
        eid = lab.pool.take_spare(lab.client, local[r], lab.start_timeout)
        if eid is None:
            raise RuntimeError(f"no engine for rank {r} registered within "
                               f"{lab.start_timeout:.0f} s")
        ids[r] = eid
    lab._join([ids[r] for r in sorted(ids)])
    lab.pool.after_fault(max(p.local_world for p in lab.placements))
    lab.heal_s = time.perf_counter() - t0
    return lab.heal_s


def interrupted(lab, cfg, run_id: str, t0: float, ars: dict, h=None):
    """Ctrl-C during a run: SIGINT reaches each engine's step as KeyboardInterrupt (ipykernel
    arms it while a request runs), the engines abort their group and return; a rank that
    does not return in time is replaced before the next run. Nothing is left queued.
    A Ctrl-C while the run was being sent leaves ranks without it (not in ``ars``): the one
    being sent may hold a half-sent request, so those engines are replaced too, and every
    rank that got the run is interrupted (it waits in a collective for the others).

    Lab.run holds further Ctrl-Cs while this runs (``h``, common.interrupts.Held): a second
    one stops the wait for the engines (those still busy are replaced), so the run is kept
    and the lab repaired whatever the person presses. A run every rank finished before the
    Ctrl-C took effect is kept as it ended (``ok``). Returns the KeyboardInterrupt for
    lab.run to raise: it says what was kept and where, the Run on it as ``.run``."""
    lab._pg_broken = True      # first: the next run re-forms the group unless all is well
    try:
        return _interrupted(lab, cfg, run_id, t0, ars, h)
    except KeyboardInterrupt:  # a third Ctrl-C abandoned it: every rank is swapped next time
        lab._replace |= set(lab.rank_to_engine)
        raise


def _interrupted(lab, cfg, run_id: str, t0: float, ars: dict, h):
    unsent = sorted(set(lab.rank_to_engine) - set(ars))
    pending = [r for r, ar in ars.items() if not ar.ready()]
    _signal(lab, pending, signal.SIGINT)
    deadline = time.monotonic() + INTERRUPT_GRACE_S
    while time.monotonic() < deadline and not all(ar.ready() for ar in ars.values()) \
            and (h is None or h.count < 2):
        lab.client.wait([ar for ar in ars.values() if not ar.ready()], timeout=0.1)
    dead = dead_ranks(lab, ars, {}, finished_too=True)
    reports, stuck = {}, []
    for r, ar in ars.items():
        if r in dead:
            reports[r] = dict(rank=r, status="failed", error=f"rank {r}'s engine died: {dead[r]}")
        elif not ar.ready():
            stuck.append(r)
            reports[r] = dict(rank=r, status="failed", error="interrupted (Ctrl-C); its engine "
                              "did not stop in time and is replaced")
        else:
            try:
                reports[r] = ar.get()
            except Exception as e:
                reports[r] = dict(rank=r, status="failed", error=f"engine error: {e}")
        if reports[r].get("error_type") == "KeyboardInterrupt":
            reports[r]["error"] = "interrupted (Ctrl-C)\n" + reports[r]["error"]
    for r in unsent:
        reports[r] = dict(rank=r, status="failed", error="interrupted (Ctrl-C) before the run "
                          "reached this rank; its engine is replaced")
    lab._replace |= set(stuck) | set(dead) | set(unsent)
    finished = not unsent and all(rep.get("status") == "ok" for rep in reports.values())
    lab._pg_broken = not finished
    run = assemble(lab, cfg, run_id, t0, reports, [])
    if not finished:
        run.status = "interrupted"
    lab.history.add(run)
    e = KeyboardInterrupt(interrupted_text(lab, run))
    e.run = run
    return e


def interrupted_text(lab, run) -> str:
    """What the KeyboardInterrupt out of an interrupted lab.run says: what was kept, where,
    and that the lab is ready."""
    if run.status != "interrupted":
        return (f"Ctrl-C as run {run.run_id} finished: it is kept as '{run.status}' in "
                f"lab.history{_where(lab, run)}; the lab is ready for the next run")
    again = sorted(lab._replace)
    return (f"run {run.run_id} interrupted (Ctrl-C); kept in lab.history as 'interrupted'"
            f"{_where(lab, run)}; "
            + (f"rank(s) {again} did not stop and get fresh engines before the next run; "
               if again else "")
            + "the next lab.run starts clean")


def kept_text(lab, run) -> str:
    """What a Ctrl-C held while a finished run was kept says when it is raised."""
    return (f"Ctrl-C while run {run.run_id} was being kept: it finished ('{run.status}') and "
            f"is in lab.history{_where(lab, run)}; the lab is ready for the next run")


def _where(lab, run) -> str:
    if run.folder is not None:
        return f", saved to {run.folder}"
    if lab.history.folder is not None:
        return " (in memory only: its save failed, see the warning)"
    return " (in memory: this lab keeps no history folder)"


def _signal(lab, ranks, sig) -> None:
    eids = [lab.rank_to_engine[r] for r in ranks]
    if lab.pool is not None:
        for e in eids:
            slot = lab.pool.by_engine(e)
            if slot is not None:
                try:
                    os.kill(slot.pid, sig)
                except ProcessLookupError:
                    pass
    elif eids:
        try:    # through each engine's nanny
            lab.client.send_signal(sig, targets=eids, block=False)
        except Exception:
            pass
