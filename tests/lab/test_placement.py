"""Rank and local-rank assignment from what engines report (fake host lists), and the
master address."""
import pytest

from nbtools.lab import placement


def ident(host, pid, local=-1):
    return dict(host=host, pid=pid, local_rank=local, cuda_visible=None)


def test_registration_order_does_not_decide_ranks():
    # engine 0 registered first but is local rank 1 (seen on the H200 host)
    p = placement.assign({0: ident("h", 11, 1), 1: ident("h", 10, 0)})
    by_eid = {x.engine_id: x for x in p}
    assert by_eid[1].rank == 0 and by_eid[0].rank == 1
    assert placement.master_addr(p) == "127.0.0.1"


def test_two_hosts_local_ranks_and_master():
    ids = {0: ident("nodeB", 5, 1), 1: ident("nodeA", 7, 0), 2: ident("nodeB", 3, 0),
           3: ident("nodeA", 9, 1)}
    p = placement.assign(ids)
    # hosts ordered by their first engine id: nodeB (engine 0) first
    table = sorted((x.rank, x.host, x.local_rank, x.local_world) for x in p)
    assert table == [(0, "nodeB", 0, 2), (1, "nodeB", 1, 2), (2, "nodeA", 0, 2), (3, "nodeA", 1, 2)]
    assert placement.master_addr(p) == "nodeB"


def test_launcher_ranks_order_the_hosts():
    # mpirun -H nodeA:2,nodeB:2: nodeB's engines registered first, nodeA holds MPI rank 0
    ids = {e: dict(ident(h, 10 + e, lr), launcher_rank=g) for e, (h, lr, g) in enumerate(
        [("nodeB", 0, 2), ("nodeB", 1, 3), ("nodeA", 1, 1), ("nodeA", 0, 0)])}
    p = placement.assign(ids)
    assert sorted((x.rank, x.host, x.local_rank) for x in p) == [
        (0, "nodeA", 0), (1, "nodeA", 1), (2, "nodeB", 0), (3, "nodeB", 1)]
    ids[3]["launcher_rank"] = -1         # not every engine says: registration order
    assert placement.master_addr(placement.assign(ids)) == "nodeB"


def test_unreported_local_ranks_follow_pid_within_host():
    ids = {0: ident("a", 30), 1: ident("b", 5), 2: ident("a", 10), 3: ident("b", 1), 4: ident("a", 20)}
    p = {x.engine_id: x for x in placement.assign(ids)}
    assert [p[e].local_rank for e in (2, 4, 0)] == [0, 1, 2]
    assert [p[e].rank for e in (2, 4, 0, 3, 1)] == [0, 1, 2, 3, 4]
    assert placement.master_addr(list(p.values())) == "a"


def test_duplicate_local_rank_is_a_clear_error():
    with pytest.raises(ValueError, match="same local rank"):
        placement.assign({0: ident("a", 1, 0), 1: ident("a", 2, 0)})
    with pytest.raises(ValueError, match="some engines report"):
        placement.assign({0: ident("a", 1, 0), 1: ident("a", 2)})


def test_identity_reads_launcher_variables(monkeypatch):
    for var in placement.LOCAL_RANK_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SLURM_LOCALID", "3")
    assert placement.identity()["local_rank"] == 3
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2")   # more specific than Slurm's
    assert placement.identity()["local_rank"] == 2


def test_pin_respects_a_launcher_choice(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    assert placement.pin(0) == "5"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    assert placement.pin(2) == "6"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert placement.pin(1) == "1"


def test_threads_split_cores():
    assert placement.threads_per_rank(16, 2) == 8
    assert placement.threads_per_rank(2, 4) == 1
