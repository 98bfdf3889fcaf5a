"""A worker whose lease on a session is lost while its migration runs elsewhere (a Ray task): the stop
signal the heartbeat sets is not a DELETE, so the session is neither finished as cancelled nor are its
files removed (another host drives it now); and a result that comes back after the stop is not kept."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from agent.migration.facade import MigrationOptions, MigrationSnapshot, ProgressFn, RunScheduler
from agent.service.executor import SessionCancelled
from agent.service.schemas import SessionOptions, SessionSource
from agent.service.settings import ServiceSettings
from agent.service.store import SessionRow, SessionStore
from agent.service.workers import Workers, repo_dir


class LosingExecutor:
    """Runs nothing: while "running", the heartbeat finds the lease lost (the lost mark and the stop event
    set, as Workers._heartbeat does), and the executor ends as the Ray executor does on its stop event."""

    def __init__(self) -> None:
        self.runs = RunScheduler()
        self.workers: Workers | None = None

    def open(self) -> None:
        return None

    def close(self) -> None:
        return None

    def start(self, row: SessionRow, opts: MigrationOptions, progress: ProgressFn,
              stop: threading.Event) -> MigrationSnapshot:
        assert self.workers is not None
        self.workers._lost[row.id].set()
        stop.set()
        raise SessionCancelled("cancelled")

    def resume(self, row: SessionRow, answer: dict[str, Any] | None, progress: ProgressFn,
               stop: threading.Event) -> MigrationSnapshot:
        raise AssertionError("not resumed")


def test_a_lost_lease_neither_cancels_the_session_nor_removes_its_files(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FERRY_DATABASE_URL", raising=False)
    settings = ServiceSettings(data_dir=tmp_path / "data")
    store = SessionStore(tmp_path / "service.db")
    store.create("s1", "alice", SessionOptions(run="python prog.py"), SessionSource(kind="path", name="/r"), 10)
    repo = repo_dir(settings, "s1")
    repo.mkdir(parents=True)
    (repo / "prog.py").write_text("print(1)\n")
    row = store.claim()
    assert row is not None
    executor = LosingExecutor()
    workers = Workers(settings, store, executor)
    executor.workers = workers
    workers.run_claimed(row)
    after = store.get("s1")
    assert after is not None and after.state == "running"  # the new holder's; nothing written over it
    assert (repo / "prog.py").read_text() == "print(1)\n"
    assert "cancelled" not in [e.kind for e in store.events_after("s1", 0)]
    store.close()


class LostOnTheDatabase(SessionStore):
    """A store whose lease on every session ran out (the heartbeat has not beaten since)."""

    leases = True

    def renew(self, held: dict[str, int]) -> tuple[set[str], set[str]]:
        return set(held), set()


class ResultExecutor(LosingExecutor):
    """Its task came back with a result: it asks before writing it, as the Ray executor does."""

    written = False

    def start(self, row: SessionRow, opts: MigrationOptions, progress: ProgressFn,
              stop: threading.Event) -> MigrationSnapshot:
        from agent.migration.facade import NodeUpdate
        from agent.service.executor import BEFORE_RESULT

        progress(BEFORE_RESULT, NodeUpdate())
        self.written = True
        raise AssertionError("the result was written with the lease lost")


def test_a_result_is_not_written_when_the_database_says_the_lease_is_lost(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FERRY_DATABASE_URL", raising=False)
    settings = ServiceSettings(data_dir=tmp_path / "data")
    store = LostOnTheDatabase(tmp_path / "service.db")
    store.create("s1", "alice", SessionOptions(run="python prog.py"), SessionSource(kind="path", name="/r"), 10)
    row = store.claim()
    assert row is not None
    executor = ResultExecutor()
    workers = Workers(settings, store, executor)
    workers.run_claimed(row)
    after = store.get("s1")
    assert not executor.written and after is not None and after.state == "running"
    assert [e.kind for e in store.events_after("s1", 0)] == ["queued", "started"]
    store.close()
