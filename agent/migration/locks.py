"""One owner per migration: a lock per migration id, kept in the checkpoint store itself.

``ferry migrate`` / ``ferry resume`` (and the service) hold :func:`migration_lock` while they drive
a migration's graph; a second process asking for the same id is refused at once with
:class:`MigrationLocked`, whose message names the holder (pid, host, since when).

* SQLite: a row in ``ferry_migration_locks`` of ``checkpoints.sqlite``, taken in a ``BEGIN
  IMMEDIATE`` transaction. A row whose holder is gone does not block: on the same machine (same
  host name, boot id and pid namespace) the holder's pid and its start time are checked in
  ``/proc``; a holder on another machine (or in another container) counts as gone once its
  heartbeat (refreshed every ``HEARTBEAT_S``) is older than ``STALE_AFTER_S``.
* Postgres: a session-level advisory lock on a connection of its own, which the server releases
  when that connection ends (a holder killed with SIGKILL included), and a row in the same table
  saying who holds it, its heartbeat refreshed as for SQLite. A server restart ends the connection
  while the holder goes on: the row (which outlives the restart) then refuses a second owner as long
  as it names a live holder (same machine: pid and start time; elsewhere: a fresh heartbeat), and
  the holder's next heartbeat takes the advisory lock back on a new connection.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.migration.checkpoints import SQLITE_FILE, database_url, describe_store, one_line, pg_conninfo
from agent.redact import redact_dsn

if TYPE_CHECKING:
    import psycopg

    PgConnection = psycopg.Connection[tuple[Any, ...]]


logger = logging.getLogger(__name__)

TABLE = "ferry_migration_locks"
HEARTBEAT_S = 15.0
STALE_AFTER_S = 120.0
SQLITE_BUSY_TIMEOUT_S = 10.0

_SCHEMA = (f"CREATE TABLE IF NOT EXISTS {TABLE} (migration_id TEXT PRIMARY KEY, token TEXT NOT NULL, "
           "pid INTEGER NOT NULL, host TEXT NOT NULL, boot_id TEXT NOT NULL, proc_start TEXT NOT NULL, "
           "since DOUBLE PRECISION NOT NULL, heartbeat DOUBLE PRECISION NOT NULL)")


@dataclass(frozen=True)
class LockHolder:
    """Who holds a migration's lock."""

    migration_id: str
    pid: int
    host: str
    since: float  # epoch seconds
    boot_id: str = ""
    proc_start: str = ""
    heartbeat: float = 0.0

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(self.since))
        return f"pid {self.pid} on host {self.host}, since {when}"


class MigrationLocked(RuntimeError):
    """Another process is driving this migration right now (a usage error: exit status 2). Raised
    before the graph runs: never a migration's status."""

    def __init__(self, migration_id: str, holder: LockHolder | None, store: str) -> None:
        who = holder.describe() if holder is not None else "another process (it has not recorded itself yet)"
        super().__init__(
            f"migration {migration_id} is already being driven by {who} (lock in {store}); wait for it to "
            f"finish or stop that process, then run `ferry resume {migration_id}` again")
        self.migration_id = migration_id
        self.holder = holder


def _boot_id() -> str:
    """This boot of this kernel and this process's pid namespace: where a holder's pid can be checked
    in ``/proc``. Containers on one machine share the boot id (and, with host networking, the host
    name) but not the pid namespace: a holder in another one counts by its heartbeat, as on another
    machine, never as gone because its pid means nothing here."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/pidns:{os.stat('/proc/self/ns/pid').st_ino}" if boot else ""
    except OSError:
        return ""


def _proc_start(pid: int) -> str:
    """The process's start time in clock ticks since boot ('' when it does not exist): with the pid
    it names one process, even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else ""


def _me() -> tuple[int, str, str, str]:
    pid = os.getpid()
    return pid, socket.gethostname(), _boot_id(), _proc_start(pid)


def holder_alive(holder: LockHolder, now: float | None = None) -> bool:
    """Whether the process named by ``holder`` still holds its lock (SQLite rows)."""
    _, host, boot, _ = _me()
    if holder.host == host and holder.boot_id == boot and boot:
        start = _proc_start(holder.pid)
        return bool(start) and start == holder.proc_start
    return ((now or time.time()) - holder.heartbeat) < STALE_AFTER_S


def _row_holder(row: tuple[Any, ...]) -> LockHolder:
    mid, _token, pid, host, boot, start, since, beat = row
    return LockHolder(migration_id=mid, pid=int(pid), host=host, since=float(since), boot_id=boot,
                      proc_start=start, heartbeat=float(beat))


_COLUMNS = "migration_id, token, pid, host, boot_id, proc_start, since, heartbeat"


class _Heartbeat(threading.Thread):
    """Refreshes the lock row's heartbeat until stopped (for holders on other machines to judge)."""

    def __init__(self, beat: Callable[[], object]) -> None:
        super().__init__(name="ferry-lock-heartbeat", daemon=True)
        self._beat = beat
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(HEARTBEAT_S):
            try:
                self._beat()
            except Exception:
                logger.debug("lock heartbeat failed", exc_info=True)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)


# --- SQLite ----------------------------------------------------------------------------------


def _sqlite_connect(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(db), timeout=SQLITE_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    conn.execute(_SCHEMA)
    return conn


def _sqlite_acquire(conn: sqlite3.Connection, migration_id: str, token: str, store: str) -> None:
    pid, host, boot, start = _me()
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute(f"SELECT {_COLUMNS} FROM {TABLE} WHERE migration_id = ?", (migration_id,)).fetchone()
        if row is not None:
            holder = _row_holder(row)
            if holder_alive(holder, now):
                raise MigrationLocked(migration_id, holder, store)
            logger.info("taking over the lock of migration %s from %s (gone)", migration_id, holder.describe())
        conn.execute(f"INSERT OR REPLACE INTO {TABLE} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (migration_id, token, pid, host, boot, start, now, now))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


@contextlib.contextmanager
def _sqlite_lock(db: Path, migration_id: str) -> Iterator[None]:
    token = uuid.uuid4().hex
    conn = _sqlite_connect(db)
    try:
        _sqlite_acquire(conn, migration_id, token, str(db))
        beat = _Heartbeat(lambda: conn.execute(f"UPDATE {TABLE} SET heartbeat = ? WHERE migration_id = ? AND token = ?",
                                               (time.time(), migration_id, token)))
        beat.start()
        try:
            yield
        finally:
            beat.stop()
            conn.execute(f"DELETE FROM {TABLE} WHERE migration_id = ? AND token = ?", (migration_id, token))
    finally:
        conn.close()


def _sqlite_holder(db: Path, migration_id: str) -> LockHolder | None:
    if not db.exists():
        return None
    with contextlib.closing(_sqlite_connect(db)) as conn:
        row = conn.execute(f"SELECT {_COLUMNS} FROM {TABLE} WHERE migration_id = ?", (migration_id,)).fetchone()
    if row is None:
        return None
    holder = _row_holder(row)
    return holder if holder_alive(holder) else None


# --- Postgres --------------------------------------------------------------------------------


def _pg_key(migration_id: str) -> int:
    """A signed 64-bit advisory-lock key for the migration id."""
    digest = hashlib.sha256(f"ferry-migration:{migration_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _pg_holder_row(conn: PgConnection, migration_id: str) -> LockHolder | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM {TABLE} WHERE migration_id = %s", (migration_id,)).fetchone()
    if row is None:
        return None
    return _row_holder(tuple(row.values()) if isinstance(row, dict) else tuple(row))


def _scalar(conn: PgConnection, query: str, params: tuple[Any, ...]) -> Any:
    """The one value a one-row query returns."""
    row = conn.execute(query, params).fetchone()
    if row is None:
        raise RuntimeError(f"the database returned no row for {query!r}")
    return row[0]


def _pg_connect(url: str, migration_id: str, store: str) -> PgConnection:
    import psycopg

    from agent.errors import ToolUnavailable

    try:
        conn = psycopg.Connection.connect(pg_conninfo(url), autocommit=True, prepare_threshold=0)
        conn.execute(_SCHEMA)
    except psycopg.Error as exc:
        raise ToolUnavailable(f"cannot take the lock of migration {migration_id} in {store}: {one_line(exc)}; "
                              "check the database server and FERRY_DATABASE_URL") from exc
    return conn


class _PgHold:
    """A held Postgres lock: its connection (replaced when the server restarted) and its row."""

    def __init__(self, url: str, migration_id: str, store: str, conn: PgConnection) -> None:
        self.url, self.migration_id, self.store = url, migration_id, store
        self.key = _pg_key(migration_id)
        self.token = uuid.uuid4().hex
        self.conn = conn
        self.since = time.time()
        self._lock = threading.Lock()

    def write_row(self) -> None:
        pid, host, boot, start = _me()
        self.conn.execute(
            f"INSERT INTO {TABLE} ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (migration_id) DO UPDATE SET token = EXCLUDED.token, pid = EXCLUDED.pid, "
            "host = EXCLUDED.host, boot_id = EXCLUDED.boot_id, proc_start = EXCLUDED.proc_start, "
            "since = EXCLUDED.since, heartbeat = EXCLUDED.heartbeat",
            (self.migration_id, self.token, pid, host, boot, start, self.since, time.time()))

    def beat(self) -> None:
        """Refresh the row; when the connection is gone (the server restarted: the advisory lock went
        with it), take the lock again on a new one. The row, which outlives restarts, refused every
        other owner meanwhile (``_pg_lock``)."""
        import psycopg

        with self._lock:
            try:
                self.conn.execute(f"UPDATE {TABLE} SET heartbeat = %s WHERE migration_id = %s AND token = %s",
                                  (time.time(), self.migration_id, self.token))
                return
            except psycopg.Error:
                logger.info("the connection holding the lock of migration %s is gone; taking the lock again",
                            self.migration_id)
            conn = _pg_connect(self.url, self.migration_id, self.store)
            if not _scalar(conn, "SELECT pg_try_advisory_lock(%s)", (self.key,)):
                conn.close()
                logger.error("migration %s: another process took its lock while the database was away; two "
                             "processes may be driving it now", self.migration_id)
                return
            old, self.conn = self.conn, conn
            with contextlib.suppress(Exception):
                old.close()
            self.write_row()

    def release(self) -> None:
        import psycopg

        with self._lock:
            try:
                self.conn.execute(f"DELETE FROM {TABLE} WHERE migration_id = %s AND token = %s",
                                  (self.migration_id, self.token))
                self.conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
            except psycopg.Error:  # the connection is gone: the server released the lock with it
                logger.debug("releasing the lock of %s failed", self.migration_id, exc_info=True)
            finally:
                with contextlib.suppress(Exception):
                    self.conn.close()


@contextlib.contextmanager
def _pg_lock(url: str, migration_id: str, store: str) -> Iterator[None]:
    conn = _pg_connect(url, migration_id, store)
    hold = _PgHold(url, migration_id, store, conn)
    try:
        if not _scalar(conn, "SELECT pg_try_advisory_lock(%s)", (hold.key,)):
            raise MigrationLocked(migration_id, _pg_holder_row(conn, migration_id), store)
        # The advisory lock is free, yet a row may name a holder that still runs: the server restarted
        # under it (the lock died with its connection; the holder takes it back at its next beat).
        row = _pg_holder_row(conn, migration_id)
        if row is not None and holder_alive(row):
            conn.execute("SELECT pg_advisory_unlock(%s)", (hold.key,))
            raise MigrationLocked(migration_id, row, store)
        if row is not None:
            logger.info("taking over the lock of migration %s from %s (gone)", migration_id, row.describe())
        hold.write_row()
    except BaseException:
        with contextlib.suppress(Exception):
            conn.close()
        raise
    beat = _Heartbeat(hold.beat)
    beat.start()
    try:
        yield
    finally:
        beat.stop()
        hold.release()


def _pg_holder(url: str, migration_id: str) -> LockHolder | None:
    import psycopg

    from agent.errors import ToolUnavailable

    try:
        conn = psycopg.Connection.connect(pg_conninfo(url), autocommit=True, prepare_threshold=0)
        conn.execute(_SCHEMA)
    except psycopg.Error as exc:
        raise ToolUnavailable(f"cannot read the lock of migration {migration_id} in the Postgres database "
                              f"{redact_dsn(url)}: {one_line(exc)}; check the database server and FERRY_DATABASE_URL"
                              ) from exc
    with conn:
        # Read pg_locks rather than try the lock: a try that succeeded for an instant would refuse a
        # real owner starting at that instant. A bigint key is held as (classid, objid), objsubid 1.
        key = _pg_key(migration_id) & 0xFFFFFFFFFFFFFFFF
        held = _scalar(conn, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
                       "AND classid = %s::bigint::oid AND objid = %s::bigint::oid", (key >> 32, key & 0xFFFFFFFF))
        row = _pg_holder_row(conn, migration_id)
        if not held:  # after a server restart, until the holder takes its lock back: its row says it runs
            return row if row is not None and holder_alive(row) else None
        return row or LockHolder(migration_id, 0, "unknown", time.time())


# --- the API ---------------------------------------------------------------------------------


@contextlib.contextmanager
def migration_lock(state_directory: Path, migration_id: str) -> Iterator[None]:
    """Hold ``migration_id``'s lock in the store in use (SQLite under ``state_directory``, or the
    Postgres database of ``FERRY_DATABASE_URL``) for the ``with`` block; raises
    :class:`MigrationLocked` at once when another live process holds it."""

    url = database_url()
    if url:
        with _pg_lock(url, migration_id, describe_store(state_directory)):
            yield
        return
    with _sqlite_lock(Path(state_directory) / SQLITE_FILE, migration_id):
        yield


def lock_holder(state_directory: Path, migration_id: str) -> LockHolder | None:
    """The live holder of ``migration_id``'s lock, or None when nobody drives it now."""

    url = database_url()
    if url:
        return _pg_holder(url, migration_id)
    return _sqlite_holder(Path(state_directory) / SQLITE_FILE, migration_id)
