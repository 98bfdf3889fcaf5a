"""The service's Postgres store in-process, two stores (two hosts) on one throwaway database: the queue is
claimed with SKIP LOCKED (no session claimed twice), a lease that runs out is requeued exactly once, a
host whose lease was lost can write nothing more (fence), and the heartbeat's renew keeps a lease alive
and carries a DELETE made on another host."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from pg_fixtures import pg_url, postgres_server  # noqa: F401 - fixtures

from agent.service.pg_store import PgSessionStore
from agent.service.schemas import SessionOptions, SessionSource
from agent.service.store import LeaseLost, QueueFull

OPTIONS = SessionOptions(run="python prog.py")
SOURCE = SessionSource(kind="path", name="/repo")


@pytest.fixture
def hosts(pg_url: str):  # noqa: F811 - the fixture
    stores = [PgSessionStore(pg_url, "host-a", 30.0), PgSessionStore(pg_url, "host-b", 30.0)]
    yield stores
    for s in stores:
        s.close()


def _add(store: PgSessionStore, n: int, limit: int = 1000) -> list[str]:
    ids = [f"s{i:03d}" for i in range(n)]
    for sid in ids:
        store.create(sid, "alice", OPTIONS, SOURCE, queue_limit=limit)
    return ids


def test_two_hosts_claiming_at_once_never_take_one_session_twice(hosts) -> None:
    a, b = hosts
    ids = _add(a, 40)
    got: dict[str, list[str]] = {"host-a": [], "host-b": []}
    barrier = threading.Barrier(4)

    def take(store: PgSessionStore) -> None:
        barrier.wait()
        while (row := store.claim()) is not None:
            assert row.state == "running" and row.fence == 1
            got[store.host].append(row.id)

    threads = [threading.Thread(target=take, args=(s,)) for s in (a, b, a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    claimed = got["host-a"] + got["host-b"]
    assert sorted(claimed) == ids and max(Counter(claimed).values()) == 1
    assert got["host-a"] and got["host-b"]  # both hosts took from the one queue
    assert b.waiting() == 0


def test_the_queue_limit_counts_every_hosts_sessions(hosts) -> None:
    a, b = hosts
    _add(a, 2, limit=2)
    with pytest.raises(QueueFull):
        b.create("s-over", "alice", OPTIONS, SOURCE, queue_limit=2)


def test_an_expired_lease_is_requeued_exactly_once_and_the_old_holder_is_fenced_off(pg_url: str) -> None:  # noqa: F811
    dead = PgSessionStore(pg_url, "host-dead", 0.3)
    others = [PgSessionStore(pg_url, f"host-{n}", 30.0) for n in range(3)]
    try:
        _add(dead, 1)
        held = dead.claim()
        assert held is not None and held.fence == 1
        assert all(o.requeue_expired() == [] for o in others)  # the lease still runs
        time.sleep(0.5)
        requeued: list[str] = []
        barrier = threading.Barrier(len(others))

        def sweep(store: PgSessionStore) -> None:
            barrier.wait()
            for _ in range(5):
                requeued.extend(store.requeue_expired())

        threads = [threading.Thread(target=sweep, args=(o,)) for o in others]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert requeued == ["s000"]
        kinds = [e.kind for e in others[0].events_after("s000", 0)]
        assert kinds == ["queued", "requeued"]
        assert others[0].events_after("s000", 1)[0].data == {"attempt": 1, "reason": "lease expired",
                                                              "host": "host-dead"}
        # requeued but not yet claimed: the old holder's writes are refused already
        with pytest.raises(LeaseLost):
            dead.update("s000", fence=1, step="scan")
        taken = others[1].claim()
        assert taken is not None and taken.id == "s000" and taken.fence == 2
        # the dead host comes back: nothing it writes lands
        with pytest.raises(LeaseLost):
            dead.update("s000", fence=1, step="late")
        with pytest.raises(LeaseLost):
            dead.add_events("s000", [("step", None, {"node": "late"})], fence=1)
        with pytest.raises(LeaseLost):
            dead.finish("s000", ("state", {"state": "failed"}, None), fence=1, state="failed", error="late")
        assert dead.renew({"s000": 1}) == ({"s000"}, set())
        assert not dead.requeue("s000", expect=("running",), fence=1)  # it cannot give back what it lost
        row = others[1].get("s000")
        assert row is not None and row.state == "running" and row.step is None and row.error is None
        assert [e.kind for e in others[1].events_after("s000", 0)] == ["queued", "requeued"]
        # the new holder writes as usual
        others[1].update("s000", fence=2, step="scan")
        others[1].finish("s000", ("state", {"state": "finished"}, "a1:end"), fence=2, state="finished")
        assert others[0].get("s000").state == "finished"  # type: ignore[union-attr]
    finally:
        for s in (dead, *others):
            s.close()


def test_renew_keeps_a_lease_alive_and_reports_a_delete_from_another_host(pg_url: str) -> None:  # noqa: F811
    a, b = PgSessionStore(pg_url, "host-a", 0.6), PgSessionStore(pg_url, "host-b", 30.0)
    try:
        _add(a, 1)
        row = a.claim()
        assert row is not None
        for _ in range(6):  # 1.2 s: twice the lease, renewed every 0.2 s
            time.sleep(0.2)
            assert a.renew({row.id: row.fence}) == (set(), set())
            assert b.requeue_expired() == []
        b.update(row.id, cancel=1)  # DELETE answered by host b
        assert a.renew({row.id: row.fence}) == (set(), {row.id})
        a.close()  # host a dies: its cancelled session is b's to finish as cancelled once the lease ran out
        time.sleep(0.8)
        again, stopped = b.interrupted()
        assert again == [] and [r.id for r in stopped] == [row.id]
    finally:
        b.close()


def test_events_of_one_session_from_two_hosts_are_numbered_without_gaps(hosts) -> None:
    a, b = hosts
    _add(a, 1)

    def write(store: PgSessionStore) -> None:
        for n in range(20):
            store.add_event("s000", "message", {"n": n, "host": store.host})

    threads = [threading.Thread(target=write, args=(s,)) for s in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    events = b.events_after("s000", 0)
    assert [e.id for e in events] == list(range(1, 42))
    assert a.last_event("s000") == b.last_event("s000") == 41
    assert a.counts("s000")["messages"] == 40
