"""A lab over several hosts: engines started through ipyparallel's SSH launcher, one engine
set per (host, local rank) so a dead rank is restarted alone on its own host, a
controller listening only on the ranks' network, and a lifeline connection per engine
that ends every remote engine when the lab closes or its client dies.

``Lab(engines=SSH({"node1": 4, "node2": 4}))`` (or just the dict) starts it; an existing
cluster (``Lab(cluster=c)``) is only waited for and described (``wait_external``).
"""
from __future__ import annotations

import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from typing import Optional

from nbtools.lab import hub
from nbtools.lab.lifeline import Lifeline
from nbtools.lab.progress_view import say

STARTUP = ("import nbtools.engine.lifeline as _nbf; _nbf.start(); "
           "import nbtools.engine.liveness as _nbl; _nbl.start()")


@dataclass
class SSH:
    """Engines per host over ssh. ``ssh_args`` go to every ssh and scp call (``-F config``,
    ``-i key``, ``-p port``); ``python`` is the interpreter on the hosts (same path
    everywhere, with nbtools installed): by default this client's."""
    hosts: dict
    ssh_args: list = field(default_factory=list)
    python: str = sys.executable

    def __post_init__(self):
        if not self.hosts or not all(isinstance(n, int) and n > 0 for n in self.hosts.values()):
            raise ValueError(f"SSH hosts must map host names to engine counts (> 0), got "
                             f"{self.hosts!r}; e.g. SSH({{'node1': 4, 'node2': 4}})")


def wanted(engines) -> bool:
    """True when ``engines`` asks for engines on other hosts (an SSH spec or a dict of hosts)."""
    return isinstance(engines, (SSH, dict))


@dataclass
class Remote:
    """One engine started over ssh: its host and local rank, the token it calls back with,
    its launcher, and its engine id once it registers."""
    host: str
    local_rank: int
    token: str
    set_id: str
    launcher: object
    engine_id: Optional[int] = None


def route_address(spec: SSH, host: str, timeout: float) -> str:
    """This client's address as ``host`` sees it (sshd's SSH_CONNECTION): the interface
    on the ranks' network, which the controller and the lifeline listen on, alone."""
    try:
        out = subprocess.run(["ssh", *spec.ssh_args, host, "echo $SSH_CONNECTION"],
                             capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"ssh {host} did not answer within {timeout:.0f} s; check that "
                           f"`ssh {' '.join(spec.ssh_args)} {host}` logs in without a "
                           "password") from None
    parts = out.stdout.split()
    if out.returncode != 0 or len(parts) < 4:
        raise RuntimeError(f"ssh {host} failed ({out.stderr.strip()[-300:] or 'no output'}); "
                           f"check that `ssh {' '.join(spec.ssh_args)} {host}` logs in "
                           "without a password")
    return parts[0]


class Hosts:
    """A lab's engines on other hosts: started over ssh, each holding a lifeline to the lab,
    identified as they register, replaced when one dies."""
    def __init__(self, lab, spec: SSH):
        self.lab, self.spec = lab, spec
        self.remotes: list = []
        self.retired: set = set()
        self.lifeline: Optional[Lifeline] = None
        self.addr = ""

    # -- starting -------------------------------------------------------------------------
    def launch(self, ipp) -> list:
        """Start the controller where the hosts can reach it and one engine per slot on each
        host; returns their engine ids once registered."""
        lab = self.lab
        first = next(iter(self.spec.hosts))
        self.addr = route_address(self.spec, first, lab.start_timeout)
        from nbtools.lab.launchers import SSHEngineSetLauncher, start_controller
        lab.cluster = start_controller(ipp, SSHEngineSetLauncher, lab.workdir, lab._guard,
                                       controller_ip=self.addr)
        self.lifeline = Lifeline(self.addr)
        for host, n in self.spec.hosts.items():
            for lr in range(n):
                self.start_one(host, lr)
        lab.client = lab.cluster.connect_client_sync()
        return self.await_engines(self.remotes)

    def start_one(self, host: str, local_rank: int) -> Remote:
        """Start one engine on ``host`` for ``local_rank`` over ssh (RuntimeError with ssh's last
        words when that fails)."""
        token = uuid.uuid4().hex
        folder = f"{self.lab.workdir}/on-{host}"
        env = {"NBTOOLS_LOCAL_RANK": str(local_rank), "PYTHONUNBUFFERED": "1",
               "NBTOOLS_LIFELINE": f"{self.addr}:{self.lifeline.port}:{token}",
               "NBTOOLS_REMOTE_DIR": folder}
        try:
            set_id = self.lab.cluster.start_engines_sync(
                n=1, engines={host: {"n": 1, "to_send": []}}, environment=env,
                engine_args=[f"--IPEngine.startup_command={STARTUP}", *hub.REGISTRATION],
                ssh_args=list(self.spec.ssh_args), scp_args=list(self.spec.ssh_args),
                remote_python=self.spec.python, remote_profile_dir=f"{folder}/ipython")
        except Exception as e:
            raise RuntimeError(f"starting an engine on {host} over ssh failed: "
                               f"{str(e).strip()[-300:]}") from None
        launcher = self.lab.cluster.engines[set_id].launchers[f"{host}/0"]
        remote = Remote(host, local_rank, token, set_id, launcher)
        self.remotes.append(remote)
        return remote

    def await_engines(self, remotes: list) -> list:
        """Engine ids of these remotes once all registered, or a clear error naming the
        hosts whose engines did not (the caller stops everything it started)."""
        import time
        deadline = time.monotonic() + self.lab.start_timeout
        while time.monotonic() < deadline:
            self.identify()
            missing = [r for r in remotes if r.engine_id is None]
            dead = [r for r in missing if self.status(r) is not None]
            if dead:
                r = dead[0]
                from nbtools.lab.launchers import output_tail
                raise RuntimeError(f"the engine for local rank {r.local_rank} on {r.host} "
                                   f"ended before registering ({self.status(r)}): "
                                   f"{output_tail(r.launcher)}")
            if not missing:
                return [r.engine_id for r in remotes]
            time.sleep(0.2)
        missing = [r for r in remotes if r.engine_id is None]
        hosts = sorted({r.host for r in missing})
        raise RuntimeError(f"{len(missing)} engine(s) on {', '.join(hosts)} did not register "
                           f"within start_timeout={self.lab.start_timeout:.0f} s (can they "
                           f"reach the controller at {self.addr}?): "
                           + "; ".join(self._missing(r) for r in missing))

    def identify(self) -> None:
        """Match newly registered engines to the remotes that started them, by the host and pid
        their lifelines reported."""
        from nbtools.lab import placement
        client = self.lab.client
        known = {r.engine_id for r in self.remotes} | self.retired
        hub.catch_up(client)
        new = [e for e in client.ids if e not in known]
        if not new:
            return
        want = {}
        for r in self.remotes:
            line = self.lifeline.get(r.token)
            if r.engine_id is None and line is not None:
                want[(line["host"], line["pid"])] = r
        ars = {e: client[e].apply_async(placement.identity) for e in new}
        for e, ar in ars.items():
            try:
                ident = ar.get(timeout=10)
            except Exception:
                continue
            r = want.get((ident["host"], ident["pid"]))
            if r is not None:
                r.engine_id = e

    def _missing(self, r: Remote) -> str:
        """What is known of one engine that did not register: whether it called back, and
        the end of its output on its host."""
        from nbtools.lab.launchers import output_tail
        line = self.lifeline.get(r.token)
        said = (f"it called back (pid {line['pid']}) but the controller does not list it"
                if line is not None else "it never called back")
        return f"local rank {r.local_rank} on {r.host}: {said}; its output: {output_tail(r.launcher)}"

    # -- faults -----------------------------------------------------------------------------
    def by_engine(self, eid) -> Optional[Remote]:
        """The remote behind engine ``eid``, or None."""
        return next((r for r in self.remotes if r.engine_id == eid), None)

    def status(self, r: Remote) -> Optional[str]:
        """None while its engine holds its lifeline; else why it is taken for dead."""
        line = self.lifeline.get(r.token) if self.lifeline is not None else None
        if line is None:
            # its exit code is not known: ipyparallel's remote waitpid reads -1 for a
            # process that is not its child
            if not getattr(r.launcher, "remote_exited", False):
                return None
            return f"its process (pid {r.launcher.pid} on {r.host}) exited before it called back"
        if line["alive"]:
            return None
        return f"its process (pid {line['pid']} on {line['host']}) ended"

    def dead(self, eid) -> Optional[str]:
        """Why engine ``eid``'s remote is gone (its status), or None when it is not one of ours."""
        r = self.by_engine(eid)
        return self.status(r) if r is not None else None

    def heal(self, ranks: set) -> None:
        """Restart these ranks' engines, each on its own host through the SSH launcher,
        and rejoin every rank; or one sentence saying which host failed and what to do."""
        lab = self.lab
        ids = dict(lab.rank_to_engine)
        fresh = {}
        for rank in sorted(ranks):
            old = self.by_engine(ids[rank])
            if old is None:
                raise RuntimeError(f"rank {rank} (engine {ids[rank]}) is not one of this "
                                   "lab's engines; lab.restart() starts fresh ones")
            why = self.status(old) or "it was stuck"
            self.retire(old)
            try:
                fresh[rank] = self.start_one(old.host, old.local_rank)
                new = self.await_engines([fresh[rank]])[0]
            except RuntimeError as e:
                raise RuntimeError(
                    f"rank {rank}'s engine on {old.host} (local rank {old.local_rank}) died "
                    f"({why}) and could not be restarted there ({e}); check the host "
                    f"(`ssh {old.host}`), then lab.restart() for fresh engines on every host, "
                    "or start a new Lab without that host. The history is kept.") from None
            say(lab, f"rank {rank} on {old.host}: {why}; restarted its engine there")
            ids[rank] = new
        lab._join([ids[r] for r in sorted(ids)])

    def retire(self, r: Remote) -> None:
        """Its engine is killed (if still running) and forgotten by ipyparallel without a
        stop call: ipyparallel's SSH stop signals the recorded remote pid and raises
        ProcessLookupError there when that process is already gone."""
        if self.status(r) is None:
            try:
                r.launcher.ssh_sender.cmd_kill(r.launcher.pid, 9)
            except Exception:
                pass
        self.lifeline.drop(r.token)        # and it ends itself on the end-of-file
        _stop_waiting(r.launcher)
        self.lab.cluster.engines.pop(r.set_id, None)
        self.remotes.remove(r)
        if r.engine_id is not None:
            self.retired.add(r.engine_id)

    def stop(self) -> None:
        """Every remote engine ends on its lifeline's end-of-file; the local ssh clients
        the launcher started for this lab (a waiter per engine) are ended by PID."""
        for r in self.remotes:
            _stop_waiting(r.launcher)
        if self.lifeline is not None:
            self.lifeline.close()
        if self.lab.cluster is not None:
            self.lab.cluster.engines.clear()     # gone by themselves: see retire()
        from nbtools.lab import sshclients
        from nbtools.lab.launchers import forget_profiles
        forget_profiles(str(self.lab.workdir))
        sshclients.end(str(self.lab.workdir))


def _stop_waiting(launcher) -> None:
    """Its waiter thread ends after its current ssh_waitpid, without reporting a stop."""
    event = getattr(launcher, "_stop_waiting", None)
    if event is not None:
        event.set()


def describe(placements) -> str:
    """'4 ranks on 2 hosts: node1 (ranks 0-1), node2 (ranks 2-3)'."""
    by_host: dict = {}
    for p in sorted(placements, key=lambda p: p.rank):
        by_host.setdefault(p.host, []).append(p.rank)
    parts = [f"{h} (rank {r[0]})" if len(r) == 1 else f"{h} (ranks {r[0]}-{r[-1]})"
             if r == list(range(r[0], r[-1] + 1)) else f"{h} (ranks {r})"
             for h, r in by_host.items()]
    n = len(by_host)
    return (f"{len(placements)} ranks on {n} host{'s' if n != 1 else ''}: "
            + ", ".join(parts))


def wait_external(lab) -> list:
    """An existing cluster: wait for its engines (``n`` given to the Lab, else the
    cluster's own ``n``, else as many as its engine sets started: an SSH set's count is its
    ``engines`` dict), or say after start_timeout how many of how many came."""
    started = sum(getattr(es, "n", 0) or 0 for es in getattr(lab.cluster, "engines", {}).values())
    want = (lab._n_requested or getattr(lab.cluster, "n", None) or started
            or len(lab.client.ids) or 1)
    if not hub.wait_for(lab.client, want, lab.start_timeout):
        have = len(lab.client.ids)
        raise RuntimeError(f"the cluster has {have} of {want} engines after start_timeout="
                           f"{lab.start_timeout:.0f} s; start the rest (or give Lab(n=...) "
                           "the count you have)")
    return sorted(lab.client.ids)
