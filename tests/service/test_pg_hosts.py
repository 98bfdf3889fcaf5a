"""Two real `ferry serve` processes on loopback sharing one throwaway Postgres database (--database) and one
data dir: they take sessions from one queue with none run twice, and a kill -9 of the one running a
session hands it to the other once its lease ran out, which resumes it from its checkpoint."""

from __future__ import annotations

from pathlib import Path

from pg_fixtures import pg_url, postgres_server  # noqa: F401 - fixtures
from service_client import PLAIN, create, read_events, wait_state, write_repo

LEASE = ("--lease", "3")


def slow(seconds: int) -> str:
    return f"import time\ntime.sleep({seconds})\n" + PLAIN


def _hosts(events: list[dict]) -> list[str]:
    return [e["data"]["host"] for e in events if e["event"] == "started"]


def test_two_servers_take_sessions_from_one_queue_and_run_each_once(serve, pg_url: str,  # noqa: F811
                                                                    tmp_path: Path) -> None:
    roots = tmp_path / "roots"
    repo = write_repo(roots, "quick", slow(1))
    flags = ("--allow-root", str(roots), "--workers", "1", "--database", pg_url, *LEASE)
    one, two = serve(*flags), serve(*flags)
    ids = [create(c, repo).json()["id"] for c in (one.client, two.client) for _ in range(2)]
    assert one.client.get("/v1/sessions").json()["total"] == 4  # one queue, seen from either server
    ran: list[str] = []
    for sid in ids:
        view = wait_state(two.client, sid, {"finished", "failed"})
        assert view["status"] == "migrated", view
        full = read_events(one.client, sid)
        assert [e["id"] for e in full] == list(range(1, len(full) + 1))
        assert len(_hosts(full)) == 1, full  # claimed once
        steps = [e["data"]["node"] for e in full if e["event"] == "step"]
        # no step run twice: the steps streamed are the migration's recorded steps, each once (a node can
        # come round again, e.g. target_run after an evidence run: docs/parity.md)
        record = one.client.get(f"/v1/sessions/{sid}/result").json()["result"]
        assert steps == [s["node"] for s in record["steps"]] + ["report"], steps
        ran += _hosts(full)
    assert len(set(ran)) == 2, ran  # both servers took sessions


def test_kill_9_hands_the_running_session_to_the_other_server_which_resumes_it(serve, pg_url: str,  # noqa: F811
                                                                               tmp_path: Path) -> None:
    roots = tmp_path / "roots"
    repo = write_repo(roots, "slow", slow(3))
    flags = ("--allow-root", str(roots), "--workers", "1", "--database", pg_url, *LEASE)
    first = serve(*flags)
    sid = create(first.client, repo).json()["id"]
    seen = read_events(first.client, sid, until=lambda e: e["event"] == "step" and e["data"]["node"] == "scan")
    second = serve(*flags)  # idle: the only session is the first one's
    assert second.client.get(f"/v1/sessions/{sid}").json()["state"] == "running"
    first.kill()  # SIGKILL mid-migration
    view = wait_state(second.client, sid, {"finished", "failed"})
    assert view["status"] == "migrated", view
    full = read_events(second.client, sid, after=0, header=False)
    assert [e["id"] for e in full] == list(range(1, len(full) + 1))
    assert [e["data"] for e in seen] == [e["data"] for e in full[:len(seen)]]  # what was sent stays as it was
    starts = [e["data"] for e in full if e["event"] == "started"]
    assert [(s["attempt"], s["resumed"]) for s in starts] == [(1, False), (1, True)]
    assert starts[0]["host"] != starts[1]["host"]
    assert [e["event"] for e in full].count("requeued") == 1
    record = second.client.get(f"/v1/sessions/{sid}/result").json()["result"]
    steps = [e["data"]["node"] for e in full if e["event"] == "step"]
    # resumed from its checkpoint: every step once (result.json is written by the report step, before its own)
    assert steps == [s["node"] for s in record["steps"]] + ["report"]


def test_a_delete_on_one_server_stops_the_session_the_other_runs(serve, pg_url: str,  # noqa: F811
                                                                 tmp_path: Path) -> None:
    roots = tmp_path / "roots"
    repo = write_repo(roots, "slow", slow(60))
    flags = ("--allow-root", str(roots), "--workers", "1", "--database", pg_url, *LEASE)
    first = serve(*flags)
    sid = create(first.client, repo).json()["id"]
    read_events(first.client, sid, until=lambda e: e["event"] == "step" and e["data"]["node"] == "scan")
    second = serve(*flags)
    answer = second.client.delete(f"/v1/sessions/{sid}")
    assert answer.status_code == 200 and answer.json()["state"] == "running"  # the first server stops it
    assert (first.data_dir / "sessions" / sid).exists()  # not removed under the running migration
    assert wait_state(second.client, sid, {"cancelled"}, timeout=50)["state"] == "cancelled"
    assert not (first.data_dir / "sessions" / sid).exists()
    assert read_events(second.client, sid)[-1]["event"] == "cancelled"
