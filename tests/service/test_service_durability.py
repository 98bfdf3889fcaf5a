"""The durable queue: a bounded queue answers 429, accepted sessions survive kill -9 of the server (queued
ones run after the restart, the interrupted one resumes from its checkpoint), and the event stream
resumes with Last-Event-ID across the restart with nothing lost or duplicated."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from service_client import PLAIN, create, read_events, wait_state, write_repo


def slow(seconds: int) -> str:
    return f"import time\ntime.sleep({seconds})\n" + PLAIN


def test_a_full_queue_answers_429_with_retry_after(serve, tmp_path: Path) -> None:
    roots = tmp_path / "roots"
    slow_repo = write_repo(roots, "slow", slow(60))
    quick = write_repo(roots, "quick", PLAIN)
    srv = serve("--allow-root", str(roots), "--workers", "1", "--queue", "2")
    c = srv.client
    running = create(c, slow_repo).json()["id"]
    wait_state(c, running, {"running"})
    queued = [create(c, quick) for _ in range(2)]
    assert [r.status_code for r in queued] == [202, 202]
    full = create(c, quick)
    assert full.status_code == 429 and int(full.headers["retry-after"]) > 0
    assert "queue is full" in full.json()["detail"]
    assert c.get("/v1/sessions").json()["total"] == 3  # the refused one left nothing
    # a cancelled queued session frees its place at once, and never runs
    first = queued[0].json()["id"]
    assert c.delete(f"/v1/sessions/{first}").json()["state"] == "cancelled"
    assert not (srv.data_dir / "sessions" / first).exists()
    assert create(c, quick).status_code == 202
    events = read_events(c, first)  # the stream of a cancelled session ends
    assert [e["event"] for e in events] == ["queued", "cancelled"]
    # a running one stops its runs (each sleeps 60 s) and ends cancelled well before they would have
    started = time.monotonic()
    assert c.delete(f"/v1/sessions/{running}").status_code == 200
    assert wait_state(c, running, {"cancelled"}, timeout=50)["state"] == "cancelled"
    assert time.monotonic() - started < 50
    assert not (srv.data_dir / "sessions" / running).exists()
    assert read_events(c, running)[-1]["event"] == "cancelled"


def test_sessions_survive_kill_9_and_the_stream_resumes_across_the_restart(serve, tmp_path: Path) -> None:
    roots = tmp_path / "roots"
    slow_repo = write_repo(roots, "slow", slow(3))
    quick = write_repo(roots, "quick", PLAIN)
    srv = serve("--allow-root", str(roots), "--workers", "1")
    c = srv.client
    a = create(c, slow_repo).json()["id"]
    others = [create(c, quick).json()["id"] for _ in range(2)]
    doomed = create(c, quick).json()["id"]
    seen = read_events(c, a, until=lambda e: e["event"] == "step" and e["data"]["node"] == "scan")
    assert c.get(f"/v1/sessions/{others[0]}").json()["state"] == "queued"
    srv.kill()  # SIGKILL, mid-migration, three sessions waiting
    # as if a DELETE of a waiting session had been recorded an instant before the kill
    with sqlite3.connect(srv.data_dir / "service.db") as db:
        db.execute("UPDATE sessions SET cancel=1 WHERE id=?", (doomed,))

    again = srv.restart()
    c = again.client
    rest = read_events(c, a, after=seen[-1]["id"])
    full = read_events(c, a, after=0, header=False)
    assert [e["id"] for e in full] == list(range(1, len(full) + 1))
    assert [e["id"] for e in seen + rest] == [e["id"] for e in full]  # nothing lost, nothing twice
    assert [e["data"] for e in seen + rest] == [e["data"] for e in full]
    starts = [e["data"] for e in full if e["event"] == "started"]
    assert starts == [{"attempt": 1, "resumed": False}, {"attempt": 1, "resumed": True}]
    record = c.get(f"/v1/sessions/{a}/result").json()["result"]
    assert record["status"] == "migrated"
    steps = [e["data"]["node"] for e in full if e["event"] == "step"]
    # every step of the migration once each (result.json is written by the report step, before its own)
    assert steps == [s["node"] for s in record["steps"]] + ["report"]
    assert len([e for e in full if e["event"] == "run"]) == record["runs"]
    view = wait_state(c, doomed, {"cancelled", "finished", "failed"}, timeout=30)
    assert view["state"] == "cancelled" and not (again.data_dir / "sessions" / doomed).exists()
    for sid in others:  # queued before the kill: ran after the restart
        view = wait_state(c, sid, {"finished", "failed"})
        assert view["status"] == "migrated", view
        kinds = [e["event"] for e in read_events(c, sid)]
        assert kinds[0] == "queued" and kinds.count("started") == 1 and kinds[-1] == "state"
