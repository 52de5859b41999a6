"""The start waits' catch-up with the hub (nbtools/lab/hub.py), on a real controller and
engines. The client is left short of an engine the way ipyparallel's connect race leaves it
(the engine registered between the hub's connection reply and the client's notification
subscription: in the hub's list, not in the client's); the race itself is timing and not
reproduced on demand."""
import ipyparallel as ipp
import pytest

from nbtools.lab import hub

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client():
    cluster = ipp.Cluster(n=2, log_level=40)
    cluster.start_cluster_sync()
    c = cluster.connect_client_sync()
    c.wait_for_engines(2, timeout=120, interactive=False)
    yield c
    c.close()
    cluster.stop_cluster_sync()


def _forget(client, eid):
    client._engines.pop(eid)
    client._ids.remove(eid)


def test_catch_up_adds_the_engine_the_client_missed(client):
    eid = client.ids[-1]
    _forget(client, eid)
    assert eid not in client.ids
    assert hub.catch_up(client, every=0) == [eid]
    assert eid in client.ids
    assert client[eid].apply_sync(abs, -42) == 42
    assert hub.catch_up(client, every=0) == []        # nothing missed: nothing added


def test_catch_up_asks_the_hub_at_most_once_per_period(client):
    hub.catch_up(client, every=0)
    eid = client.ids[0]
    _forget(client, eid)
    assert hub.catch_up(client, every=3600) == []     # asked a moment ago: not again
    assert eid not in client.ids
    assert hub.catch_up(client, every=0) == [eid]


def test_wait_for_counts_a_missed_engine_and_gives_up_on_a_missing_one(client):
    _forget(client, client.ids[0])
    assert hub.wait_for(client, 2, timeout=30)
    assert not hub.wait_for(client, 3, timeout=2)


def test_catch_up_with_a_dead_hub_gives_up_instead_of_hanging():
    cluster = ipp.Cluster(n=1, log_level=40)
    cluster.start_cluster_sync()
    c = cluster.connect_client_sync()
    try:
        c.wait_for_engines(1, timeout=120, interactive=False)
        cluster.stop_cluster_sync()                   # the controller is gone
        assert hub.catch_up(c, every=0) == []         # after REPLY_S, not never
    finally:
        c.close()
