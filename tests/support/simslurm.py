"""A Slurm cluster on the simulated hosts (tests/support/simhosts.py): munged and slurmctld on the
client's side of the bridge, one slurmd inside each host's namespace (its hostname, its
address, its /etc/hosts), everything configured in a temp folder made here.

Debian's Slurm 22.05 (slurmctld, slurmd, slurm-client, munge). Its cgroup plugin needs the
cgroup mounts that `ip netns exec` hides (it remounts /sys), so each slurmd enters only the
host's network namespace and gets its own mount namespace with the host's hosts file bound
on /etc/hosts. No GRES: a count-only ``gres/gpu`` without device files registers as 0 GPUs
here and drains the node, so jobs ask for no GPUs. ``close()`` ends every daemon by PID.
"""
from __future__ import annotations

import os
import random
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "scancel", "nsenter", "unshare")


def why_not() -> str | None:
    for tool in TOOLS:
        if shutil.which(tool) is None:
            return f"a simulated Slurm cluster needs `{tool}` (apt-get install slurmctld " \
                   "slurmd slurm-client munge)"
    return None


class SimSlurm:
    def __init__(self, sim):
        self.sim = sim
        self.tmp = Path(tempfile.mkdtemp(prefix="nbtools-simslurm-"))
        self.procs: list = []
        self.conf = self.tmp / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _spawn(self, argv, name: str, host: str | None = None) -> None:
        log = open(self.tmp / f"{name}.log", "w")
        if host is not None:
            ns = self.sim.ns[host]
            argv = ["nsenter", f"--net=/run/netns/{ns}", "unshare", "--uts", "--mount", "sh",
                    "-c", f"mount --bind /etc/netns/{ns}/hosts /etc/hosts && hostname {host} "
                    "&& exec " + shlex.join(argv)]
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=log, env=self.env,
                                           stdin=subprocess.DEVNULL, start_new_session=True))

    def _build(self) -> None:
        t, sim = self.tmp, self.sim
        key = t / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = t / "munge.sock"
        self._spawn(["munged", "-F", "--force", f"--socket={sock}", f"--key-file={key}",
                     f"--pid-file={t}/munged.pid", f"--log-file={t}/munged.log.d",
                     f"--seed-file={t}/munged.seed"], "munged")
        port = random.randint(20000, 30000)
        (t / "state").mkdir()
        nodes = "".join(f"NodeName={h} NodeAddr={sim.addr[h]} CPUs=8 State=UNKNOWN\n"
                        for h in sim.names)
        self.conf.write_text(
            f"ClusterName=nbtsim\nSlurmctldHost=simclient({sim.client_addr})\n"
            f"SlurmctldPort={port}\nSlurmdPort={port + 1}\n"
            f"AuthType=auth/munge\nAuthInfo=socket={sock}\nCredType=cred/munge\n"
            "SlurmUser=root\nSlurmdUser=root\n"
            f"StateSaveLocation={t}/state\nSlurmdSpoolDir={t}/spool-%n\n"
            f"SlurmctldPidFile={t}/slurmctld.pid\nSlurmdPidFile={t}/slurmd-%n.pid\n"
            f"SlurmctldLogFile={t}/slurmctld.log.d\nSlurmdLogFile={t}/slurmd-%n.log.d\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
            "JobAcctGatherType=jobacct_gather/none\nSchedulerType=sched/builtin\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
            # the hosts' 2 cores are shared: the configured CPUs are believed
            "SlurmdParameters=config_overrides\nReturnToService=2\nMpiDefault=none\n"
            + nodes + "PartitionName=lab Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n")
        self._wait(sock.exists, 20, "munged did not start")
        # slurmctld checks that its own hostname is the SlurmctldHost named above
        self._spawn(["unshare", "--uts", "sh", "-c",
                     f"hostname simclient && exec slurmctld -D -i -f {self.conf}"], "slurmctld")
        for h in sim.names:
            (t / f"spool-{h}").mkdir()
            self._spawn(["slurmd", "-D", "-N", h, "-f", str(self.conf)], f"slurmd-{h}", h)
        self._wait(lambda: self.sinfo().count("idle") == len(sim.names), 60,
                   "the nodes did not come up")

    def _wait(self, cond, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return
            time.sleep(0.5)
        raise RuntimeError(f"simulated Slurm: {what} within {timeout:.0f} s: {self.logs()}")

    def sinfo(self) -> str:
        return self.run("sinfo", "-h", "-o", "%n %T", check=False).stdout

    def run(self, *cmd, check=True, **env):
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=60,
                              check=check, env=dict(self.env, **env))

    def logs(self) -> str:
        return " | ".join(f"{p.name}: {p.read_text()[-400:]}"
                          for p in sorted(self.tmp.glob("*.log*")))

    def close(self) -> None:
        for p in self.procs:
            try:
                p.kill()
            except OSError:
                pass
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)
