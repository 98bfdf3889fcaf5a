"""One owner per migration: the lock in the checkpoint store (SQLite and a real Postgres server).

The holders are real processes: a second one is refused at once with a message naming the
holder, and a holder killed with SIGKILL does not block the next one.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agent.migration.locks import MigrationLocked, lock_holder, migration_lock

ROOT = Path(__file__).resolve().parents[2]
URL_ENV = "FERRY_DATABASE_URL"

_spec = importlib.util.spec_from_file_location("pg_server_lock", Path(__file__).with_name("pg_server.py"))
pg_server = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pg_server)
postgres_server = pg_server.postgres_server  # fixtures, found by pytest in this module
pg_url = pg_server.pg_url

# Takes the lock, says so on stdout, then holds it until killed.
HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from agent.migration.locks import migration_lock
    with migration_lock(Path(sys.argv[1]), sys.argv[2]):
        print("held", flush=True)
        time.sleep(600)
""")


def _start_holder(sdir: Path, mid: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(sdir), mid], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    line = proc.stdout.readline()
    assert line.strip() == "held", proc.stderr.read()
    return proc


def _kill_9(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path, monkeypatch) -> dict[str, str]:
    """The environment selecting the store (and the same in this process)."""
    if request.param == "sqlite":
        monkeypatch.delenv(URL_ENV, raising=False)
        return {}
    url = request.getfixturevalue("pg_url")
    monkeypatch.setenv(URL_ENV, url)
    return {URL_ENV: url}


def test_second_owner_is_refused_at_once_naming_the_holder(tmp_path, store):
    sdir = tmp_path / "state"
    sdir.mkdir()
    holder = _start_holder(sdir, "m1", store)
    try:
        t0 = time.monotonic()
        with pytest.raises(MigrationLocked) as info, migration_lock(sdir, "m1"):
            pytest.fail("a second owner got the lock")
        assert time.monotonic() - t0 < 5, "refusal must be immediate, not a wait"
        msg = str(info.value)
        assert f"pid {holder.pid}" in msg and socket.gethostname() in msg and "since" in msg
        assert "ferry resume m1" in msg
        assert info.value.holder is not None and info.value.holder.pid == holder.pid
        seen = lock_holder(sdir, "m1")
        assert seen is not None and seen.pid == holder.pid
        # another migration id is not blocked
        with migration_lock(sdir, "m2"):
            pass
    finally:
        _kill_9(holder)


def test_holder_killed_with_sigkill_does_not_block(tmp_path, store):
    sdir = tmp_path / "state"
    sdir.mkdir()
    holder = _start_holder(sdir, "m1", store)
    _kill_9(holder)
    deadline = time.monotonic() + 20  # Postgres notices the closed connection within moments
    while lock_holder(sdir, "m1") is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert lock_holder(sdir, "m1") is None
    with migration_lock(sdir, "m1"):
        assert lock_holder(sdir, "m1").pid == os.getpid()
    assert lock_holder(sdir, "m1") is None  # released at the end of the block


def test_sqlite_row_of_a_reused_pid_is_stale(tmp_path, monkeypatch):
    """A row naming a live pid whose start time differs (the pid was reused) does not block."""
    import sqlite3

    from agent.migration import locks
    monkeypatch.delenv(URL_ENV, raising=False)
    sdir = tmp_path / "state"
    sdir.mkdir()
    conn = locks._sqlite_connect(sdir / "checkpoints.sqlite")
    now = time.time()
    _, host, boot, _ = locks._me()
    conn.execute(f"INSERT INTO {locks.TABLE} VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                 ("m1", "t", os.getppid(), host, boot, "1", now, now))  # a live pid, a wrong start time
    conn.close()
    assert lock_holder(sdir, "m1") is None
    with migration_lock(sdir, "m1"):
        pass
    # a row from another machine counts while its heartbeat is fresh, not after
    with sqlite3.connect(sdir / "checkpoints.sqlite") as c:
        c.execute(f"INSERT INTO {locks.TABLE} VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                  ("m2", "t", 1, "elsewhere", "other-boot", "5", now, now))
    assert lock_holder(sdir, "m2").host == "elsewhere"
    with pytest.raises(MigrationLocked, match="on host elsewhere"), migration_lock(sdir, "m2"):
        pass
    with sqlite3.connect(sdir / "checkpoints.sqlite") as c:
        c.execute(f"UPDATE {locks.TABLE} SET heartbeat = ? WHERE migration_id = 'm2'", (now - locks.STALE_AFTER_S - 1,))
    with migration_lock(sdir, "m2"):
        pass


# A holder whose heartbeat is quick, so that the test sees it take its lock back after a restart.
QUICK_HOLDER = HOLDER.replace(
    "from agent.migration.locks import migration_lock",
    "from agent.migration import locks\nfrom agent.migration.locks import migration_lock\nlocks.HEARTBEAT_S = 0.3")


def test_a_postgres_restart_does_not_let_a_second_owner_in(tmp_path, postgres_server, pg_url, monkeypatch):
    """The advisory lock dies with its connection, so a server restart released it while its holder
    went on driving the migration: a second `ferry resume` got in at once. The holder's row (still
    there, naming a live process) refuses it, and the holder takes its lock back."""
    monkeypatch.setenv(URL_ENV, pg_url)
    sdir = tmp_path / "state"
    sdir.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", QUICK_HOLDER, str(sdir), "m1"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, URL_ENV: pg_url})
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()
        time.sleep(1.0)  # the throwaway server commits asynchronously: let its WAL writer flush the row
        postgres_server.crash()
        postgres_server.restart()
        with pytest.raises(MigrationLocked) as info, migration_lock(sdir, "m1"):
            pytest.fail("a second owner got the lock while its holder still runs")
        assert info.value.holder is not None and info.value.holder.pid == holder.pid
        seen = lock_holder(sdir, "m1")
        assert seen is not None and seen.pid == holder.pid
        deadline = time.monotonic() + 20  # the holder's heartbeat takes the advisory lock back
        while time.monotonic() < deadline:
            with __import__("psycopg").connect(pg_url, autocommit=True) as c:
                if c.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted").fetchone()[0]:
                    break
            time.sleep(0.2)
        else:
            pytest.fail("the holder did not take its lock back after the restart")
        assert holder.poll() is None
    finally:
        _kill_9(holder)
    deadline = time.monotonic() + 20
    while lock_holder(sdir, "m1") is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    with migration_lock(sdir, "m1"):  # the holder is gone: not blocked
        assert lock_holder(sdir, "m1").pid == os.getpid()


def _other_pid_namespace(argv: list[str]) -> list[str]:
    """``argv`` as a process of a new pid namespace (as in another container on this machine: same
    host name and boot id, its own pids), killed when the returned process is."""
    return ["unshare", "--pid", "--mount-proc", "--kill-child", *argv]


def _can_make_pid_namespaces() -> bool:
    try:
        return subprocess.run(_other_pid_namespace(["true"]), capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _can_make_pid_namespaces(), reason="cannot make pid namespaces here (unshare --pid)")
def test_a_holder_in_another_pid_namespace_is_not_taken_for_gone(tmp_path, monkeypatch):
    """Same host name, same boot id, another pid namespace (a container sharing the state dir, with
    host networking): its pid, looked up in this /proc, named another process or none, so its live
    lock was taken over and two processes drove the migration."""
    monkeypatch.delenv(URL_ENV, raising=False)
    sdir = tmp_path / "state"
    sdir.mkdir()
    env = {k: v for k, v in os.environ.items() if k != URL_ENV}
    holder = subprocess.Popen(_other_pid_namespace([sys.executable, "-c", HOLDER, str(sdir), "m1"]), cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()
        with pytest.raises(MigrationLocked) as info, migration_lock(sdir, "m1"):
            pytest.fail("a live holder in another pid namespace lost its lock")
        assert f"on host {socket.gethostname()}" in str(info.value)
        assert lock_holder(sdir, "m1") is not None
    finally:
        _kill_9(holder)
