"""lab: the engines import a Workload's modules as soon as the lab can know them.

On a fresh GPU host a transformers Workload's first run spent 22.6 s of 24 s importing
transformers (docs/benchmarks.md, issue 34.8), after the person had already typed the
Workload's cell and the next one. The lab learns of a Workload when it is made in this
process while the lab is open (config/imports.watch), when the lab starts after it was
made (config/imports.recent), and at the latest when ``lab.check``/``lab.run`` gets it;
each engine is then asked, without waiting for an answer, to import the Workload's
modules in a background thread (engine/preload.py). A run waits for that import before
its own, so it never pays for the same import twice, and finds whatever is done.

Nothing here blocks the notebook: a send is one small ipyparallel message per engine.
"""
from __future__ import annotations

import threading

from nbtools.config import imports
from nbtools.config.step_config import ConfigError
from nbtools.engine import preload as engine_preload


def for_lab(lab, preload):
    """The lab's Preloader, or None for Lab(preload=False)."""
    if not isinstance(preload, bool):
        raise ConfigError(f"Lab(preload={preload!r}): give True (the engines import a "
                          "Workload's modules as soon as the lab sees it) or False")
    return Preloader(lab) if preload else None


class Preloader:
    """One per Lab. ``sent``: engine id -> names already asked for there (an engine that
    replaces a rank, a spare or a restart's, gets them on the next check)."""

    def __init__(self, lab):
        self.lab = lab
        self.sent: dict = {}
        self.thread = None

    def attach(self) -> None:
        """After the lab's engines joined: learn of new Workloads, and preload the ones
        already made (a notebook that makes its Workload before its Lab)."""
        self.sent = {}
        self.thread = threading.get_ident()
        imports.unwatch(self.made)
        imports.watch(self.made)
        for wl in imports.recent():
            self.seen(wl)

    def detach(self) -> None:
        """Stop hearing of new Workloads (the lab closed)."""
        imports.unwatch(self.made)

    def made(self, wl) -> None:
        """A Workload was made in this process. Sent only from the thread that started the
        lab: ipyparallel's client (its zmq sockets) is not for two threads at once, and a
        Workload made elsewhere (a widget's thread) is sent by lab.check at the latest."""
        if threading.get_ident() == self.thread:
            self.seen(wl)

    def seen(self, wl) -> int:
        """Send the Workload's imports to every engine that does not have them; how many
        (engine, name) pairs went out."""
        lab = self.lab
        if lab.closed or lab.client is None or not getattr(lab, "rank_to_engine", None):
            return 0
        try:
            names = imports.workload_imports(wl)
        except Exception:   # noqa: BLE001 - an odd object in a closure; the run imports it
            return 0
        if not names:
            return 0
        n = 0
        for e in lab.rank_to_engine.values():
            new = [x for x in names if x not in self.sent.setdefault(e, set())]
            if not new:
                continue
            try:
                lab.client[e].apply_async(engine_preload.start, new)
            except Exception:   # noqa: BLE001 - the run imports them anyway
                continue
            self.sent[e].update(new)
            n += len(new)
        return n

    def records(self, timeout: float = 30.0) -> dict:
        """rank -> the engine's preload records (name, ok, seconds, error, started, done;
        ok None while that import still runs)."""
        lab = self.lab
        ranks = sorted(lab.rank_to_engine)
        got = lab._on([lab.rank_to_engine[r] for r in ranks], engine_preload.records,
                      timeout=timeout)
        return dict(zip(ranks, got))
