"""Simulated hosts for the multi-host tests: network + UTS + mount namespaces on a private
bridge, each with its own hostname, address, hosts file and sshd listening only there.

Everything made here is made by this file and removed by ``SimHosts.close()``: the
namespaces (and every process inside them, found through ``ip netns pids``), the bridge,
the veth pairs, /etc/netns/<ns>/, the temp folder with the keys. Only addresses on the
private /24 chosen here are ever contacted.

``python tests/support/simhosts.py`` builds two hosts, prints an ssh line and waits for Enter
(to try the recipes by hand), then removes everything.
"""
from __future__ import annotations

import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"


def why_not() -> str | None:
    """The reason simulated hosts cannot be built here, or None."""
    if os.name != "posix" or os.geteuid() != 0:
        return "simulated hosts need root (network namespaces and a bridge)"
    for tool in ("ip", "unshare", "ssh", "scp", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"simulated hosts need `{tool}` (not on PATH)"
    if not os.access(SSHD, os.X_OK):
        return f"simulated hosts need sshd ({SSHD}: openssh-server not installed)"
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if r.returncode != 0:
        return f"`ip netns` does not work here: {r.stderr.strip()}"
    return None


def _run(*cmd, check=True):
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip() or r.stdout.strip()}")
    return r


def _free_subnet() -> str:
    """A 10.x.y.0/24 no interface on this machine uses."""
    used = _run("ip", "-4", "-o", "addr").stdout
    for _ in range(50):
        net = f"10.{random.randint(64, 250)}.{random.randint(1, 250)}"
        if f" {net}." not in used:
            return net
    raise RuntimeError("no free 10.x.y.0/24 found for the simulated hosts")


class SimHosts:
    def __init__(self, n: int = 2):
        self.tag = f"{os.getpid() % 10000:04d}{random.randint(0, 99):02d}"
        self.net = _free_subnet()
        self.client_addr = f"{self.net}.1"
        self.bridge = f"nbtbr{self.tag}"
        self.names = [f"simhost-{chr(ord('a') + i)}" for i in range(n)]
        self.ns = {h: f"nbt{self.tag}{chr(ord('a') + i)}" for i, h in enumerate(self.names)}
        self.addr = {h: f"{self.net}.{i + 2}" for i, h in enumerate(self.names)}
        self.tmp = Path(tempfile.mkdtemp(prefix="nbtools-simhosts-"))
        self.sshd: dict = {}
        self.made: list = []     # what to undo, in reverse
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    # -- building ---------------------------------------------------------------------
    def _build(self) -> None:
        key = self.tmp / "id_ed25519"
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.tmp / "hostkey"))
        shutil.copy(f"{key}.pub", self.tmp / "authorized_keys")
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        self.made.append(("link", self.bridge))
        _run("ip", "addr", "add", f"{self.client_addr}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        hosts = "127.0.0.1 localhost\n" + "".join(
            f"{self.addr[h]} {h}\n" for h in self.names) + f"{self.client_addr} simclient\n"
        Path("/run/sshd").mkdir(exist_ok=True)     # sshd's privilege-separation folder
        lines = []
        for i, h in enumerate(self.names):
            ns = self.ns[h]
            _run("ip", "netns", "add", ns)
            self.made.append(("netns", ns))
            etc = Path("/etc/netns") / ns      # `ip netns exec` bind-mounts these on /etc
            etc.mkdir(parents=True)
            self.made.append(("dir", str(etc)))
            (etc / "hosts").write_text(hosts)
            (etc / "hostname").write_text(h + "\n")
            outer, inner = f"nbtv{self.tag}{i}", f"nbti{self.tag}{i}"
            _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            self.made.append(("link", outer))
            _run("ip", "link", "set", inner, "netns", ns)
            _run("ip", "link", "set", outer, "master", self.bridge, "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.addr[h]}/24", "dev", inner)
            _run("ip", "-n", ns, "link", "set", inner, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            sshd = [SSHD, "-D", "-e", "-f", "/dev/null",
                    "-o", f"ListenAddress={self.addr[h]}",
                    "-o", f"HostKey={self.tmp / 'hostkey'}",
                    "-o", f"AuthorizedKeysFile={self.tmp / 'authorized_keys'}",
                    "-o", "StrictModes=no", "-o", "PermitRootLogin=prohibit-password",
                    "-o", "PasswordAuthentication=no", "-o", "KbdInteractiveAuthentication=no",
                    "-o", "UsePAM=no", "-o", "PidFile=none", "-o", "MaxStartups=200",
                    "-o", "MaxSessions=200", "-o", "LogLevel=ERROR",
                    "-o", "Subsystem=sftp internal-sftp"]
            # own UTS namespace: the host's own hostname (the engines report it)
            script = f"hostname {h} && exec " + shlex.join(sshd)
            log = open(self.tmp / f"sshd-{h}.log", "w")
            self.sshd[h] = subprocess.Popen(
                ["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c", script],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
            lines += [f"Host {h}", f"  HostName {self.addr[h]}"]
        # a name for an address on the private /24 where no host answers: a host that is down
        lines += ["Host simhost-gone", f"  HostName {self.net}.250"]
        lines += ["Host " + " ".join(self.names) + " simhost-gone", "  User root",
                  f"  IdentityFile {key}", "  IdentitiesOnly yes",
                  "  StrictHostKeyChecking no", "  UserKnownHostsFile /dev/null",
                  "  BatchMode yes", "  LogLevel ERROR", "  ConnectTimeout 5"]
        (self.tmp / "ssh_config").write_text("\n".join(lines) + "\n")
        for h in self.names:
            self._wait_sshd(h)

    def _wait_sshd(self, h: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.sshd[h].poll() is not None:
                raise RuntimeError(f"sshd on {h} exited: "
                                   + (self.tmp / f"sshd-{h}.log").read_text()[-500:])
            try:
                socket.create_connection((self.addr[h], 22), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"sshd on {h} ({self.addr[h]}:22) did not come up in {timeout} s")

    # -- using ------------------------------------------------------------------------
    @property
    def ssh_args(self) -> list:
        return ["-F", str(self.tmp / "ssh_config")]

    def ssh(self, host: str, command: str, timeout: float = 30) -> str:
        return subprocess.run(["ssh", *self.ssh_args, host, command], capture_output=True,
                              text=True, timeout=timeout, check=True).stdout

    def pids(self, host: str) -> list:
        """Every process inside the host's namespace except its sshd listener."""
        out = _run("ip", "netns", "pids", self.ns[host], check=False).stdout.split()
        return [int(p) for p in out if int(p) != self.sshd[host].pid]

    def cmdlines(self, host: str) -> list:
        out = []
        for pid in self.pids(host):
            try:
                out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                           .decode(errors="replace").strip())
            except OSError:
                pass
        return out

    def listening(self, host: str) -> set:
        """Addresses anything inside the host's namespace listens on (TCP, v4 and v6), from
        the namespace's own /proc/<pid>/net tables."""
        import ipaddress
        out = set()
        for name in ("tcp", "tcp6"):
            try:
                rows = Path(f"/proc/{self.sshd[host].pid}/net/{name}").read_text().splitlines()[1:]
            except OSError:
                continue
            for row in rows:
                local, state = row.split()[1], row.split()[3]
                if state != "0A":           # LISTEN
                    continue
                raw = bytes.fromhex(local.split(":")[0])
                # the kernel prints each 32-bit word in host (little-endian) order
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                out.add(str(ipaddress.ip_address(raw)))
        return out

    def unplug(self, host: str, up: bool = False) -> None:
        """The host drops off the network (its cable pulled: no reset, no end-of-file,
        packets to it go nowhere); ``up=True`` plugs it back in."""
        i = self.names.index(host)
        _run("ip", "link", "set", f"nbtv{self.tag}{i}", "up" if up else "down")

    # -- removing -----------------------------------------------------------------------
    def close(self) -> None:
        for kind, name in reversed(self.made):
            if kind == "netns":
                for _ in range(3):          # processes inside, by pid, then the namespace
                    pids = _run("ip", "netns", "pids", name, check=False).stdout.split()
                    if not pids:
                        break
                    for p in pids:
                        try:
                            os.kill(int(p), signal.SIGKILL)
                        except (ProcessLookupError, ValueError):
                            pass
                    time.sleep(0.2)
                _run("ip", "netns", "del", name, check=False)
            elif kind == "link":
                _run("ip", "link", "del", name, check=False)
            elif kind == "dir":
                shutil.rmtree(name, ignore_errors=True)
        self.made.clear()
        for p in self.sshd.values():
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


if __name__ == "__main__":
    reason = why_not()
    if reason:
        raise SystemExit(reason)
    with SimHosts() as sim:
        for h in sim.names:
            print(h, sim.addr[h], sim.ssh(h, "hostname; cat /etc/hosts | tail -1").split())
        print(f"ssh {' '.join(sim.ssh_args)} {sim.names[0]}")
        input("Enter removes the hosts> ")
