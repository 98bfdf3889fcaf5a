"""The GitHub jobs on Postgres ($FERRY_SERVICE_DATABASE), two stores as two servers on one throwaway
database: one job per delivery, one running job per repository across both servers, a job whose server let its
lease run out queued again exactly once, and that server's late end refused."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
from pathlib import Path

_NAME = "pg_server_github"
if _NAME not in sys.modules:
    _path = Path(__file__).resolve().parents[1] / "agent" / "pg_server.py"
    _spec = importlib.util.spec_from_file_location(_NAME, _path)
    sys.modules[_NAME] = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
    _spec.loader.exec_module(sys.modules[_NAME])  # type: ignore[union-attr]
postgres_server = sys.modules[_NAME].postgres_server  # fixtures, found by pytest in this module
pg_url = sys.modules[_NAME].pg_url

from agent.prbot.github.webhook import Trigger  # noqa: E402
from agent.prbot.store import GitHubStore, PgGitHubStore  # noqa: E402


def _jobs(data_dir: Path):
    """The GitHub jobs of a server on ``data_dir`` with a token and no GitHub to talk to (nothing reaches it)."""
    from agent.prbot.github.config import GitHubConfig
    from agent.prbot.jobs import GitHubJobs

    config = GitHubConfig.from_env({"FERRY_GITHUB_TOKEN": "t"}, webhook=False)
    assert config is not None

    class NoClient:
        def close(self) -> None:
            return None

    return GitHubJobs(data_dir, config, NoClient())  # type: ignore[arg-type]


def _trigger(delivery: str, repo: str = "app") -> Trigger:
    return Trigger(delivery=delivery, event="issue_comment", owner="acme", repo=repo, number=1, is_pull=False,
                   sender="ann", run_command="python p.py")


def test_the_database_url_opens_the_shared_store(pg_url, tmp_path, monkeypatch):
    monkeypatch.setenv("FERRY_SERVICE_DATABASE", pg_url)
    store = GitHubStore(tmp_path / "github.db")
    try:
        assert isinstance(store, PgGitHubStore) and not (tmp_path / "github.db").exists()
        assert store.add(_trigger("a")) == (True, 0)
    finally:
        store.close()
    monkeypatch.delenv("FERRY_SERVICE_DATABASE")
    monkeypatch.setenv("FERRY_DATABASE_URL", pg_url)  # the checkpoints only: the jobs stay in github.db
    local = GitHubStore(tmp_path / "github.db")
    assert type(local) is GitHubStore and local.get("a") is None
    local.close()


def test_two_servers_share_one_queue_one_running_job_per_repository(pg_url, tmp_path):
    a, b = PgGitHubStore(tmp_path, pg_url), PgGitHubStore(tmp_path, pg_url)
    try:
        assert a.add(_trigger("d1")) == (True, 0)
        assert b.add(_trigger("d1")) == (False, 0)  # a redelivery to the other server
        assert b.add(_trigger("d2")) == (True, 1)
        for n in range(3, 9):
            a.add(_trigger(f"d{n}", repo=f"r{n}"))
        claimed: list[str] = []
        barrier = threading.Barrier(4)

        def take(store: PgGitHubStore) -> None:
            barrier.wait()
            while (row := store.claim()) is not None:
                claimed.append(row.delivery)

        threads = [threading.Thread(target=take, args=(s,)) for s in (a, b, a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert sorted(claimed) == sorted(["d1", *(f"d{n}" for n in range(3, 9))])  # d2 waits for d1's repo
        holder = a if "d1" in a._held else b
        holder.finish("d1", "done", "ok")
        row = a.claim() or b.claim()
        assert row is not None and row.delivery == "d2"
        total, views = b.views(repo="acme/app")
        assert total == 2 and [v.delivery for v in views] == ["d2", "d1"]
    finally:
        a.close()
        b.close()


def test_an_expired_job_is_requeued_once_and_its_old_server_cannot_end_it(pg_url, tmp_path):
    dead = PgGitHubStore(tmp_path, pg_url, lease_s=0.3)
    others = [PgGitHubStore(tmp_path, pg_url) for _ in range(3)]
    try:
        dead.add(_trigger("d1"))
        assert dead.claim() is not None
        dead._stop.set()  # its heartbeat stops, as a paused server's would
        dead._beat.join(timeout=5)
        time.sleep(0.5)
        requeued: list[str] = []
        barrier = threading.Barrier(len(others))

        def sweep(store: PgGitHubStore) -> None:
            barrier.wait()
            for _ in range(5):
                requeued.extend(store.requeue_running())

        threads = [threading.Thread(target=sweep, args=(o,)) for o in others]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert requeued == ["d1"]
        again = others[0].claim()
        assert again is not None and again.attempt == 2
        assert dead.renew() == {"d1"}
        dead.finish("d1", "failed", "late")  # refused: the lease is another server's now
        row = others[1].get("d1")
        assert row is not None and row.state == "running" and row.outcome is None
        others[0].finish("d1", "done", "ok")
        assert others[2].get("d1").state == "done"  # type: ignore[union-attr]
    finally:
        for s in (dead, *others):
            s.close()


def test_a_cancel_on_another_server_and_a_lost_lease_reach_the_server_running_the_job(pg_url, tmp_path, monkeypatch):
    """The heartbeat of the server running a job tells its jobs to stop it: when a DELETE on another server
    asked for it (before, only that server's own running jobs were signalled), and when its lease was lost
    (another server runs it again: this one must not go on pushing and replying)."""
    from agent.migration.facade import RunScheduler
    monkeypatch.setenv("FERRY_SERVICE_DATABASE", pg_url)
    jobs = _jobs(tmp_path)
    store = jobs.store
    assert isinstance(store, PgGitHubStore)
    store._stop.set()  # its heartbeat again, beating every 0.1 s
    store._beat.join(timeout=5)
    store._stop.clear()
    store.lease_s = 0.3
    store._beat = threading.Thread(target=store._heartbeat, daemon=True)
    store._beat.start()
    other = PgGitHubStore(tmp_path, pg_url)
    try:
        store.add(_trigger("d1"))
        row = store.claim()
        assert row is not None
        signal = threading.Event()
        jobs._running["d1"] = (signal, RunScheduler())
        assert other.request_cancel("d1") == "running"
        assert signal.wait(timeout=5)
        assert "d1" not in jobs._lost  # a cancel: its thread is told, as for a cancel here
        store.add(_trigger("d2", repo="r2"))
        row = store.claim()
        assert row is not None and row.delivery == "d2"
        lost = threading.Event()
        jobs._running["d2"] = (lost, RunScheduler())
        with store._pool.connection() as db:  # another server took it meanwhile (its lease had run out)
            db.execute("UPDATE ferry_github_jobs SET lease_owner='elsewhere', attempt=attempt+1 WHERE delivery='d2'")
        assert lost.wait(timeout=5) and "d2" in jobs._lost
    finally:
        other.close()
        store.close()


def test_a_job_that_lost_its_lease_here_ends_without_a_word_in_its_thread(tmp_path, monkeypatch):
    monkeypatch.delenv("FERRY_SERVICE_DATABASE", raising=False)
    jobs = _jobs(tmp_path)
    said: list[str] = []
    monkeypatch.setattr(jobs, "_say", lambda t, body: said.append(body))

    def attempt(row, signal, runs):
        assert jobs.store.on_stop is not None
        jobs.store.on_stop(row.delivery, row.delivery == "lost")  # what the shared store's heartbeat does
        assert signal.is_set()
        return "cancelled", f"Ferry: {row.delivery} was cancelled", "cancelled"

    monkeypatch.setattr(jobs, "_attempt", attempt)
    for delivery in ("lost", "asked"):
        jobs.store.add(_trigger(delivery, repo=delivery))
        row = jobs.store.claim()
        assert row is not None
        jobs._run(row)
    assert said == ["Ferry: asked was cancelled"]
    jobs.store.close()


def test_a_review_follow_up_ends_as_a_migration_does(tmp_path, monkeypatch, caplog):
    """One end for both kinds of job: a follow-up whose lease was lost ends unrecorded here, one cancelled
    between its claim and its start sees its stop set and ends ``cancelled``, and a database failure at its end
    is logged as such with the worker alive."""
    import logging

    from agent.prbot.github.webhook import ReviewAsk
    from agent.prbot.review import follow_up as follow_up_mod

    monkeypatch.delenv("FERRY_SERVICE_DATABASE", raising=False)
    jobs = _jobs(tmp_path)
    seen: dict[str, bool] = {}

    def fake_follow_up(t, ctx):
        seen[t.delivery] = ctx.stop.is_set()
        if t.delivery == "lost":
            assert jobs.store.on_stop is not None
            jobs.store.on_stop(t.delivery, True)  # the shared store's heartbeat: another server has it now
        return follow_up_mod.FollowUpEnd(state="done", outcome="answered in the thread")

    monkeypatch.setattr(follow_up_mod, "follow_up", fake_follow_up)

    def review_trigger(delivery: str) -> Trigger:
        return _trigger(delivery, repo=delivery).model_copy(update={
            "review": ReviewAsk(branch="ferry/migrate-main", base="main", comment_id=7, body="/ferry try again")})

    for delivery in ("lost", "plain"):
        jobs.store.add(review_trigger(delivery))

    ends: dict[str, str] = {}
    for _ in range(2):
        row = jobs.store.claim()
        assert row is not None
        if row.delivery == "plain":
            jobs.store.request_cancel("plain")  # asked after the claim, before the job starts
        jobs._run(row)
        got = jobs.store.get(row.delivery)
        assert got is not None
        ends[row.delivery] = got.state
    assert seen == {"lost": False, "plain": True}
    assert ends == {"lost": "running", "plain": "cancelled"}  # a lost lease's row is the other server's to end

    jobs.store.add(review_trigger("db"))
    row = jobs.store.claim()
    assert row is not None

    def broken_finish(delivery, state, outcome):
        raise RuntimeError("database gone")

    monkeypatch.setattr(jobs.store, "finish", broken_finish)
    with caplog.at_level(logging.ERROR, logger="agent.prbot.jobs"):
        jobs._run(row)  # does not raise
    assert any("could not record its end" in r.getMessage() for r in caplog.records)
    jobs.store.close()
