"""A lab over two simulated hosts (network + UTS + mount namespaces on a private bridge,
sshd in each) through ipyparallel's SSH launcher: 4 gloo ranks, DDP and FSDP2 steps,
per-host ranks in the run, a rank killed on host b healed, nothing left on either host.

Needs root, `ip` and sshd (tests/support/simhosts.py says which is missing); CI runs as root.
Only addresses on the private /24 the test made are contacted.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from support.simhosts import SimHosts, why_not

from nbtools import Lab, StepConfig  # noqa: E402
from nbtools.results.errors import RunFailed  # noqa: E402
from nbtools.lab.hosts import SSH  # noqa: E402

pytestmark = pytest.mark.slow

from support.lab_steps import SMALL
from support.paths import ROOT
ENGINE = "-m ipyparallel.engine --"   # the engine, not its nanny


def _engines(sim, host):
    return [c for c in sim.cmdlines(host) if ENGINE in c]


# how long processes (and ssh clients) may take to go after a stop: a bound, not a wait (they
# are usually gone in well under a second), wide enough for a 2-core box running two test
# workers (dev.py test), where 10 s once ran out on a Slurm step still exiting
GONE_S = 60


def _until(cond, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return cond()


def _listening(pids, ports=None) -> set:
    """The addresses ``pids`` listen on (only on ``ports``, when given)."""
    out = set()
    for pid in pids:
        try:
            for c in psutil.Process(pid).net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN and (ports is None or c.laddr.port in ports):
                    out.add(c.laddr.ip)
        except psutil.Error:
            pass
    return out


@pytest.fixture(scope="module")
def sim():
    if why_not() is not None:
        pytest.skip(why_not())
    with SimHosts(2) as s:
        yield s


@pytest.fixture(scope="module")
def lab(sim, tmp_path_factory):
    lab = Lab(engines=SSH({h: 2 for h in sim.names}, ssh_args=sim.ssh_args),
              history=tmp_path_factory.mktemp("history"), timeout=180, pg_timeout=60,
              start_timeout=120)
    yield lab
    lab.close()


def test_four_ranks_on_two_hosts(lab, sim):
    a, b = sim.names
    assert lab.world_size == 4 and lab.device_type == "cpu"
    hosts = {p.rank: (p.host, p.local_rank) for p in lab.placements}
    assert hosts == {0: (a, 0), 1: (a, 1), 2: (b, 0), 3: (b, 1)}
    assert len(_engines(sim, a)) == 2 and len(_engines(sim, b)) == 2


def test_listening_only_on_the_ranks_network(lab, sim):
    # controller (and its schedulers) and the lifeline: the client's bridge address (and
    # loopback, for the controller's own internal sockets), never all interfaces
    ctrl = psutil.Process(lab.cluster.controller.pid)
    # this process: only the lifeline's socket is the lab's (another test may have left a
    # server of its own listening here)
    here = _listening([ctrl.pid] + [c.pid for c in ctrl.children(recursive=True)]) \
        | _listening([os.getpid()], ports={lab.hosts.lifeline.port})
    assert sim.client_addr in here and here <= {sim.client_addr, "127.0.0.1"}, here
    assert lab.hosts.addr == sim.client_addr
    # inside each host: the store (rank 0), gloo and sshd on the host's address (the
    # engines' nannies on loopback), nothing on all interfaces
    for h in sim.names:
        there = sim.listening(h)
        assert sim.addr[h] in there and there <= {sim.addr[h], "127.0.0.1"}, (h, there)
    # the connection files keep their HMAC key and point the engines at that address
    engine_file = next(Path(lab.cluster.profile_dir, "security").glob("*engine.json"))
    info = json.loads(engine_file.read_text())
    assert len(info["key"]) >= 32 and info["signature_scheme"].startswith("hmac-")
    assert sim.client_addr in info["interface"]


def test_ddp_and_fsdp2_across_hosts(lab, sim):
    a, b = sim.names
    for scenario in ("ddp-train", "fsdp2-train"):
        run = lab.run(StepConfig(scenario=scenario, **SMALL))
        assert run.ok, run.reports
        assert sorted(run.env["hosts"]) == sorted(sim.names)
        assert {r: run.ranks[r]["host"] for r in range(4)} == {0: a, 1: a, 2: b, 3: b}
        assert set(run.events["rank"].unique()) == {0, 1, 2, 3}, scenario
    # the timeline's lanes say which host each rank ran on
    from nbtools.ui.timeline import Timeline
    labels = list(Timeline(run).figure.yaxis[0].major_label_overrides.values())
    assert any(str(x).startswith(f"r0@{a} CPU thread") for x in labels), labels
    assert any(str(x).startswith(f"r3@{b} CPU thread") for x in labels), labels


def test_rank_killed_on_host_b_heals(lab, sim):
    a, b = sim.names
    victim = next(p for p in lab.placements if p.rank == 3)
    assert victim.host == b
    before = len(lab.history)

    def _kill_self(ctx):
        import os
        import signal
        import torch.distributed as dist
        if dist.get_rank() == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        dist.barrier()

    with pytest.raises(RunFailed) as e:
        lab.run(_kill_self, StepConfig(scenario="custom", warmup=0, steps=1, profiled=0))
    assert "rank 3" in str(e.value)
    assert len(lab.history) == before + 1           # the failed run is kept
    run = lab.run(StepConfig(scenario="ddp-train", **SMALL))   # healed on host b
    assert run.ok and lab.world_size == 4
    assert {p.rank: p.host for p in lab.placements}[3] == b
    assert not psutil.pid_exists(victim.pid) or victim.pid not in sim.pids(b)
    assert len(_engines(sim, b)) == 2 and len(_engines(sim, a)) == 2
    assert len(lab.history) == before + 2


def _hang_on_rank2(ctx):
    import time
    if ctx.rank == 2:
        time.sleep(3600)


def test_rank_stuck_on_host_b_is_replaced_there(lab, sim):
    from nbtools.results.errors import RunTimeout
    b = sim.names[1]
    stuck = next(p for p in lab.placements if p.rank == 2)
    with pytest.raises(RunTimeout, match=r"rank\(s\) \[2\]"):
        lab.run(_hang_on_rank2, StepConfig(scenario="custom", warmup=0, steps=1, profiled=0),
                timeout=10)
    run = lab.run(StepConfig(scenario="ddp-train", **SMALL))
    assert run.ok
    now = next(p for p in lab.placements if p.rank == 2)
    assert now.host == b and now.pid != stuck.pid
    assert stuck.pid not in sim.pids(b)          # killed over ssh, not left sleeping
    assert len(_engines(sim, b)) == 2


def _ssh_clients(config) -> list:
    """Local ssh/scp clients using this ssh config (whoever's child they are now)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if cmd and os.path.basename(cmd[0]) in ("ssh", "scp") and str(config) in cmd:
            out.append(p.pid)
    return out


def test_close_leaves_nothing_on_either_host(lab, sim):
    """Even with host b off the network at close(): the lab's local ssh clients (an
    ssh_waitpid per engine, which would wait on b forever) end at once; b's engines end
    when b is back (their lifeline's end-of-file arrives)."""
    profile = Path(lab.workdir)
    config = sim.ssh_args[-1]
    assert _until(lambda: _ssh_clients(config), GONE_S)     # the launcher's waiters
    b = sim.names[1]
    sim.unplug(b)
    try:
        lab.close()
        assert _until(lambda: _ssh_clients(config) == [], GONE_S), _ssh_clients(config)
    finally:
        sim.unplug(b, up=True)
    for h in sim.names:
        assert _until(lambda: sim.pids(h) == [], GONE_S), (h, sim.cmdlines(h))
    assert not profile.exists()


CTRL_C_CLIENT = """
import os, sys, time
from nbtools import Lab, StepConfig
from nbtools.lab.hosts import SSH
hosts, ssh_args, history, marks = sys.argv[1].split(","), sys.argv[2:4], sys.argv[4], sys.argv[5]
lab = Lab(engines=SSH({h: 2 for h in hosts}, ssh_args=ssh_args), history=history,
          timeout=180, pg_timeout=60, start_timeout=120)

def step(ctx):
    import os, time
    open(os.path.join(marks, f"r{ctx.rank}"), "w").close()
    time.sleep(600)

print("ready", flush=True)
try:
    lab.run(step, StepConfig(scenario="custom", warmup=0, steps=1, profiled=0))
    print("not interrupted", flush=True)
except KeyboardInterrupt as e:
    print("interrupted", lab.history[-1].status, len(lab.history), flush=True)
    print(e, flush=True)
run = lab.run(StepConfig(scenario="ddp-train", warmup=1, steps=2, profiled=1))
print("next", run.ok, len(lab.history), sorted(p.host for p in lab.placements), flush=True)
lab.close()
print("closed", flush=True)
"""


def test_ctrl_c_in_a_run_across_hosts_keeps_it_and_leaves_nothing(sim, tmp_path):
    """A terminal's Ctrl-C (SIGINT to the client's whole process group) while 4 ranks on
    2 hosts are inside a step: the run is kept as interrupted, the next run works, and
    after close() nothing is left on either host nor any local ssh client."""
    a, b = sim.names
    config = tmp_path / "ssh_config"          # this client's own: its ssh clients findable
    config.write_text(Path(sim.ssh_args[-1]).read_text())
    marks = tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "client.py"
    script.write_text(CTRL_C_CLIENT)
    client = subprocess.Popen(
        [sys.executable, str(script), f"{a},{b}", "-F", str(config), str(tmp_path / "history"),
         str(marks)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        assert client.stdout.readline().strip() == "ready", client.stderr.read()[-2000:]
        assert _until(lambda: len(os.listdir(marks)) == 4, 120), os.listdir(marks)
        os.killpg(client.pid, signal.SIGINT)
        out, err = client.communicate(timeout=300)
    finally:
        if client.poll() is None:
            client.kill()
    lines = out.splitlines()
    assert lines[0] == "interrupted interrupted 1", (out, err[-2000:])
    assert "interrupted (Ctrl-C); kept in lab.history" in lines[1], lines
    assert lines[2:4] == [f"next True 2 {[a, a, b, b]}", "closed"], (out, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    for h in sim.names:
        assert _until(lambda: sim.pids(h) == [], GONE_S), (h, sim.cmdlines(h))
    assert _until(lambda: _ssh_clients(config) == [], GONE_S), _ssh_clients(config)


def test_killed_client_leaves_nothing_on_either_host(sim, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(Path(sim.ssh_args[-1]).read_text())
    script = tmp_path / "client.py"
    script.write_text(
        "import sys\n"
        "from nbtools import Lab\nfrom nbtools.lab.hosts import SSH\n"
        f"lab = Lab(engines=SSH({ {h: 1 for h in sim.names}!r}, ssh_args={['-F', str(config)]!r}),"
        " history=None, start_timeout=120)\n"
        "print('ready', flush=True)\nsys.stdin.read()\n")
    client = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline().strip() == "ready"
        assert all(len(_engines(sim, h)) == 1 for h in sim.names)
        os.kill(client.pid, signal.SIGKILL)
        client.wait(10)
        for h in sim.names:
            assert _until(lambda: sim.pids(h) == [], GONE_S), (h, sim.cmdlines(h))
        # its waiters' ssh clients end with the engines they waited on
        assert _until(lambda: _ssh_clients(config) == [], GONE_S), _ssh_clients(config)
    finally:
        if client.poll() is None:
            client.kill()


def test_mpirun_over_ssh_starts_the_engines_on_both_hosts(sim, tmp_path):
    """docs/clusters.md's MPI recipe on the simulated hosts: ipcontroller on the ranks' network,
    OpenMPI's mpirun starting 2 engines per host over ssh, Lab(cluster=Client) attached:
    ranks in mpirun's order, local ranks from OpenMPI, one DDP step; the engines are
    mpirun's (close() leaves them), and ending mpirun leaves nothing on either host."""
    import ipyparallel as ipp
    if shutil.which("mpirun") is None:
        pytest.skip("OpenMPI's mpirun is not installed (apt-get install openmpi-bin)")
    a, b = sim.names
    profile = tmp_path / "profile_lab"
    bin_ = Path(sys.executable).parent
    log = open(tmp_path / "mpi.log", "w")
    ctrl = subprocess.Popen([str(bin_ / "ipcontroller"), f"--ip={sim.client_addr}",
                             f"--profile-dir={profile}", "--log-level=40"],
                            stdout=log, stderr=log, start_new_session=True)
    # root in CI; the simulated hosts' ssh config (a cluster's ~/.ssh/config does this)
    mpi = subprocess.Popen(
        ["mpirun", "--allow-run-as-root", "--mca", "plm_rsh_args", " ".join(sim.ssh_args),
         "-np", "4", "-H", f"{a}:2,{b}:2", "-x", "PATH", sys.executable, "-m",
         "ipyparallel.engine", f"--profile-dir={profile}", "--log-level=40"],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        assert _until(lambda: (profile / "security/ipcontroller-client.json").exists(), 60)
        lab = Lab(cluster=ipp.Client(profile_dir=str(profile)), n=4, history=None,
                  start_timeout=120, timeout=180, pg_timeout=60)
        assert [(p.rank, p.host, p.local_rank) for p in lab.placements] == [
            (0, a, 0), (1, a, 1), (2, b, 0), (3, b, 1)]
        run = lab.run(StepConfig(scenario="ddp-train", warmup=1, steps=1, profiled=0))
        assert run.ok and sorted(run.env["hosts"]) == [a, b], run.reports
        lab.close()
        assert all(len(_engines(sim, h)) == 2 for h in sim.names)     # mpirun's, not ours
        mpi.send_signal(signal.SIGINT)         # a person's Ctrl-C on mpirun
        mpi.wait(30)
        for h in sim.names:
            assert _until(lambda: sim.pids(h) == [], GONE_S), (h, sim.cmdlines(h))
    finally:
        procs = []
        for proc in (mpi, ctrl):               # with their children (the schedulers)
            try:
                procs += [proc] + psutil.Process(proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                pass
        for proc in procs:
            try:
                proc.kill()
            except (psutil.NoSuchProcess, ProcessLookupError):
                pass
        for proc in (mpi, ctrl):
            proc.wait()


def _docs_sbatch() -> str:
    text = (ROOT / "docs" / "clusters.md").read_text()
    part = text[text.index("**Slurm**"):]
    return part[part.index("```bash\n") + 8:part.index("```", part.index("```bash\n") + 8)]


def test_docs_sbatch_script_on_a_two_node_slurm(sim, tmp_path):
    """docs/clusters.md's sbatch script (the README links it), submitted to a Slurm cluster
    of the two simulated hosts:
    ipcontroller on the first node's address, srun's engines on both, Lab(cluster=Client)
    attached in Slurm's rank order, one DDP step; scancel leaves only the slurmds. Without
    its GPU requests (no GPUs here) and with 2 tasks per node instead of 4."""
    import ipyparallel as ipp
    from support.simslurm import SimSlurm
    from support.simslurm import why_not as slurm_why_not
    if slurm_why_not():
        pytest.skip(slurm_why_not())
    a, b = sim.names
    script = _docs_sbatch()
    for gpu in ("#SBATCH --gpus-per-node=4\n", " --gpus-per-task=1"):
        assert gpu in script
        script = script.replace(gpu, "")
    script = script.replace("ntasks-per-node=4", "ntasks-per-node=2").replace(
        "cpus-per-task=8", "cpus-per-task=1")
    job = tmp_path / "job.sh"
    job.write_text(script)
    slurm = SimSlurm(sim)
    try:
        out = slurm.run("sbatch", f"--chdir={tmp_path}", f"--output={tmp_path}/job.out",
                        str(job), HOME=str(tmp_path),
                        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
        jobid = out.stdout.split()[-1]
        profile = tmp_path / f".ipython/profile_nbtools-{jobid}"
        assert _until(lambda: (profile / "security/ipcontroller-client.json").exists(), 60), \
            slurm.logs()
        lab = Lab(cluster=ipp.Client(profile_dir=str(profile)), n=4, history=None,
                  start_timeout=120, timeout=180, pg_timeout=60)
        assert [(p.rank, p.host, p.local_rank) for p in lab.placements] == [
            (0, a, 0), (1, a, 1), (2, b, 0), (3, b, 1)]
        run = lab.run(StepConfig(scenario="ddp-train", warmup=1, steps=1, profiled=0))
        assert run.ok, run.reports
        info = json.loads((profile / "security/ipcontroller-client.json").read_text())
        assert info["interface"] == f"tcp://{sim.addr[a]}", info     # the cluster network
        lab.close()
        slurm.run("scancel", jobid)
        for h in sim.names:
            assert _until(lambda: [c for c in sim.cmdlines(h) if "slurmd -D" not in c] == [],
                          GONE_S), (h, sim.cmdlines(h))
    finally:
        slurm.close()


def test_unreachable_host_is_a_clear_error_and_leaves_nothing(sim):
    a = sim.names[0]
    with pytest.raises(RuntimeError, match="simhost-gone") as e:
        Lab(engines=SSH({a: 1, "simhost-gone": 1}, ssh_args=sim.ssh_args), history=None,
            start_timeout=60)
    assert "ssh" in str(e.value)
    assert _until(lambda: sim.pids(a) == [], GONE_S), sim.cmdlines(a)


def test_engine_that_exits_before_calling_back_is_named_with_its_output(sim, tmp_path):
    """An engine over ssh that dies before its startup command (here: its python refuses to
    start an engine; in CI, an engine giving up on a slow registration reply) has no lifeline
    to drop: the start says so, with the engine's own words, instead of waiting out
    start_timeout and blaming the network."""
    a, b = sim.names
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n"
                      'case "$*" in *ipyparallel.engine*) echo "no driver for this test" >&2;'
                      " exit 3;; esac\n"
                      f'exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    with pytest.raises(RuntimeError) as e:
        Lab(engines=SSH({a: 1}, ssh_args=sim.ssh_args, python=str(python)), history=None,
            start_timeout=120)
    msg = str(e.value)
    assert f"the engine for local rank 0 on {a} ended before registering" in msg, msg
    assert "exited before it called back" in msg, msg
    assert "no driver for this test" in msg, msg
    for h in sim.names:
        assert _until(lambda: sim.pids(h) == [], GONE_S), (h, sim.cmdlines(h))


def test_external_cluster_short_of_engines_is_a_clear_error():
    import ipyparallel as ipp
    with ipp.Cluster(n=1, log_level=40) as client:
        with pytest.raises(RuntimeError, match="the cluster has 1 of 2 engines after "
                           "start_timeout=5 s"):
            Lab(cluster=client, n=2, history=None, start_timeout=5)
        assert len(client.ids) == 1          # the user's engine is left alone


def _kill_rank1(ctx):
    import os
    import signal
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)


def test_external_ssh_cluster_is_waited_for_and_a_dead_engine_named(sim, tmp_path, capsys):
    """The issue's own steps: ipyparallel's SSH cluster started by the user, then
    Lab(cluster=c): all its engines, not the first to register; a dead one named."""
    import ipyparallel as ipp
    a, b = sim.names
    c = ipp.Cluster(engines="ssh", controller_ip=sim.client_addr, log_level=40,
                    profile_dir=str(tmp_path / "ipython"))
    try:
        c.start_controller_sync()
        c.start_engines_sync(n=2, engines={a: 1, b: 1}, ssh_args=sim.ssh_args,
                             scp_args=sim.ssh_args, remote_python=sys.executable)
        lab = Lab(cluster=c, history=tmp_path / "history", start_timeout=120)
        assert "2 ranks on 2 hosts" in capsys.readouterr().err
        assert {p.host for p in lab.placements} == {a, b}
        with pytest.raises(RunFailed):
            lab.run(_kill_rank1, StepConfig(scenario="custom", warmup=0, steps=1, profiled=0))
        with pytest.raises(RuntimeError, match=rf"rank 1 \(engine \d+ on {b}\) died or stopped "
                           "answering; this lab did not start its cluster"):
            lab.run(StepConfig(scenario="ddp-train", **SMALL))
        assert len(lab.history) == 1
        lab.close()
    finally:
        try:
            c.stop_cluster_sync()
        except Exception:
            pass            # ipyparallel's SSH stop of the dead engine (its behaviour)
        for h in sim.names:
            for pid in sim.pids(h):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
