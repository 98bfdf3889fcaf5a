"""The GitHub jobs' own table (``github.db`` beside ``service.db``): one row per accepted delivery.

The delivery id is a key, and so is the SHA-256 of the signed event (``payload_key``): a redelivery, or the
same signed body replayed under a new delivery id, inserts nothing. A job is ``queued`` until a worker
claims it, and a worker claims only a job whose repository has none ``running``: two commands on one
repository run one after the other. A server that died leaves its ``running`` jobs to the next one,
which queues them again (a job is safe to repeat: the branch moves by compare-and-swap and the
pull request is found and updated).

With the service on a Postgres database (``ferry serve --database``, or ``$FERRY_SERVICE_DATABASE``), the
jobs live in its ``ferry_github_jobs`` table instead, shared by every server on that database
(:class:`PgGitHubStore`; ``GitHubStore(path)`` opens it): a claim is a lease of this server's, renewed by
the store's own heartbeat; a job whose server let its lease run out is queued again once, by whichever
server sees it first; a server whose lease was lost cannot record the job's end over the new holder's.
"""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.migration.facade import pg_conninfo
from agent.prbot.github.webhook import Trigger
from agent.settings import settings
from agent.sqlite_tx import immediate

logger = logging.getLogger(__name__)

JobState = Literal["queued", "running", "done", "failed", "cancelled"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    delivery TEXT PRIMARY KEY,
    repo TEXT NOT NULL,
    state TEXT NOT NULL,
    trigger TEXT NOT NULL,
    created REAL NOT NULL,
    started REAL,
    finished REAL,
    outcome TEXT,
    attempt INTEGER NOT NULL DEFAULT 0,
    cancel INTEGER NOT NULL DEFAULT 0,
    payload_key TEXT
);
CREATE INDEX IF NOT EXISTS jobs_repo_state ON jobs (repo, state);
"""
# After the upgrade below (an older github.db has no payload_key column yet). A job's signed event is its
# key as much as its delivery: a replay of the body under a new X-GitHub-Delivery inserts nothing.
# (NULL, rows from before the column, never collide.)
PAYLOAD_INDEX = "CREATE UNIQUE INDEX IF NOT EXISTS jobs_payload_key ON jobs (payload_key)"


class JobRow(BaseModel):
    delivery: str
    repo: str
    state: JobState
    trigger: Trigger
    outcome: str | None = None
    attempt: int = Field(default=0, description="how many times a worker claimed it (2+: after a restart)")


class JobView(BaseModel):
    """A job as ``GET /v1/github/jobs`` shows it: what it was asked, where it stands, how it ended."""

    delivery: str
    repo: str
    number: int = Field(description="the issue or pull request it answers on")
    event: str
    sender: str
    base: str | None
    run_command: str | None
    test_command: str | None
    state: JobState
    attempt: int
    cancel_requested: bool
    created: float
    started: float | None
    finished: float | None
    outcome: str | None = Field(description="the result comment's text, or the failure's reason")


def _job(row: Any, **now: Any) -> JobRow:
    """A row as the workers use it; ``now``: fields the statement that read it has just changed."""
    fields = {"delivery": row["delivery"], "repo": row["repo"], "state": row["state"],
              "trigger": Trigger.model_validate_json(row["trigger"]), "outcome": row["outcome"],
              "attempt": int(row["attempt"])}
    return JobRow(**{**fields, **now})


def _view(row: Any) -> JobView:
    t = Trigger.model_validate_json(row["trigger"])
    return JobView(delivery=row["delivery"], repo=row["repo"], number=t.number, event=t.event, sender=t.sender,
                   base=t.base, run_command=t.run_command, test_command=t.test_command, state=row["state"],
                   attempt=int(row["attempt"]), cancel_requested=bool(row["cancel"]), created=row["created"],
                   started=row["started"], finished=row["finished"], outcome=row["outcome"])


class GitHubStore:
    """The jobs in ``path`` (SQLite), or in Postgres when ``$FERRY_SERVICE_DATABASE`` names one (then
    ``GitHubStore(path)`` is a :class:`PgGitHubStore` and ``path`` is not used)."""

    #: called by a shared store's heartbeat with each delivery this server runs that must stop here: a
    #: cancel asked on another server, or a lease lost (True: another server runs it now)
    on_stop: Callable[[str, bool], None] | None = None

    def __new__(cls, path: Path, *args: Any, **kwargs: Any) -> GitHubStore:
        if cls is GitHubStore and settings().service.service_database:
            return super().__new__(PgGitHubStore)
        return super().__new__(cls)

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(jobs)")}
        for column in ("attempt", "cancel"):  # a github.db from before jobs counted attempts and took cancels
            if column not in columns:
                self._db.execute(f"ALTER TABLE jobs ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0")
        if "payload_key" not in columns:  # a github.db from before replays were keyed on the signed body
            self._db.execute("ALTER TABLE jobs ADD COLUMN payload_key TEXT")
        self._db.execute(PAYLOAD_INDEX)
        self._lock = threading.Lock()

    def close(self) -> None:
        self._db.close()

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        return immediate(self._db, self._lock)

    def add(self, trigger: Trigger) -> tuple[bool, int]:
        """Record a delivery's job: (False, 0) when the delivery, or its signed event (``payload_key``), was
        seen before, else (True, how many jobs of its repository are ahead of it)."""
        with self._tx() as db:
            cur = db.execute("INSERT OR IGNORE INTO jobs (delivery, repo, state, trigger, created, payload_key) "
                             "VALUES (?, ?, 'queued', ?, ?, ?)",
                             (trigger.delivery, trigger.full_name, trigger.model_dump_json(), time.time(),
                              trigger.payload_key))
            if cur.rowcount == 0:
                return False, 0
            ahead = db.execute("SELECT COUNT(*) FROM jobs WHERE repo = ? AND state IN ('queued', 'running') "
                               "AND delivery != ?", (trigger.full_name, trigger.delivery)).fetchone()[0]
            return True, int(ahead)

    def claim(self) -> JobRow | None:
        """The oldest queued job whose repository has none running, now ``running``."""
        with self._tx() as db:
            row = db.execute("SELECT * FROM jobs WHERE state = 'queued' AND repo NOT IN "
                             "(SELECT repo FROM jobs WHERE state = 'running') ORDER BY created, rowid LIMIT 1"
                             ).fetchone()
            if row is None:
                return None
            db.execute("UPDATE jobs SET state = 'running', started = ?, attempt = attempt + 1 WHERE delivery = ?",
                       (time.time(), row["delivery"]))
        return _job(row, state="running", attempt=int(row["attempt"]) + 1)

    def finish(self, delivery: str, state: JobState, outcome: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE jobs SET state = ?, finished = ?, outcome = ? WHERE delivery = ?",
                       (state, time.time(), outcome[:4000], delivery))

    def requeue_running(self) -> list[str]:
        """At start: the jobs a dead server left running are queued again (those it was asked to cancel
        end ``cancelled``: see :meth:`cancelled_at_restart`)."""
        with self._tx() as db:
            rows = [r[0] for r in db.execute("SELECT delivery FROM jobs WHERE state = 'running' AND cancel = 0")]
            db.execute("UPDATE jobs SET state = 'queued', started = NULL WHERE state = 'running' AND cancel = 0")
        return rows

    def cancelled_at_restart(self) -> list[JobRow]:
        """At start: the running jobs a dead server had been asked to cancel, now ``cancelled``."""
        with self._tx() as db:
            rows = db.execute("SELECT * FROM jobs WHERE state = 'running' AND cancel = 1").fetchall()
            db.execute("UPDATE jobs SET state = 'cancelled', finished = ?, outcome = 'cancelled (the server "
                       "stopped before the job did)' WHERE state = 'running' AND cancel = 1", (time.time(),))
        return [_job(r, state="cancelled") for r in rows]

    def request_cancel(self, delivery: str) -> JobState | None:
        """Cancel a job; returns the state it was in. A ``queued`` one is now ``cancelled``; a ``running``
        one is marked, and its worker stops it at its next step; an ended one is left. None: no such job."""
        with self._tx() as db:
            row = db.execute("SELECT state FROM jobs WHERE delivery = ?", (delivery,)).fetchone()
            if row is None:
                return None
            if row["state"] == "queued":
                db.execute("UPDATE jobs SET state = 'cancelled', cancel = 1, finished = ?, outcome = 'cancelled "
                           "before it started' WHERE delivery = ?", (time.time(), delivery))
            elif row["state"] == "running":
                db.execute("UPDATE jobs SET cancel = 1 WHERE delivery = ?", (delivery,))
            was: JobState = row["state"]
            return was

    def cancel_requested(self, delivery: str) -> bool:
        with self._lock:
            row = self._db.execute("SELECT cancel FROM jobs WHERE delivery = ?", (delivery,)).fetchone()
        return bool(row and row[0])

    def get(self, delivery: str) -> JobRow | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM jobs WHERE delivery = ?", (delivery,)).fetchone()
        if row is None:
            return None
        return _job(row)

    def view(self, delivery: str) -> JobView | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM jobs WHERE delivery = ?", (delivery,)).fetchone()
        return None if row is None else _view(row)

    def views(self, *, repo: str | None = None, state: JobState | None = None, limit: int = 50,
              offset: int = 0) -> tuple[int, list[JobView]]:
        """Jobs newest first (optionally of one repository or in one state), and how many match."""
        where, args = [], []
        if repo is not None:
            where.append("repo = ?")
            args.append(repo)
        if state is not None:
            where.append("state = ?")
            args.append(state)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        with self._lock:
            total = int(self._db.execute(f"SELECT COUNT(*) FROM jobs{clause}", args).fetchone()[0])
            rows = self._db.execute(f"SELECT * FROM jobs{clause} ORDER BY created DESC, rowid DESC LIMIT ? OFFSET ?",
                                    [*args, limit, offset]).fetchall()
        return total, [_view(r) for r in rows]


GITHUB_LEASE_S = 60.0
PG_NOW = "extract(epoch from clock_timestamp())"
PG_CLAIM_LOCK_KEY = 0x46455247  # "FERG": one claim at a time across servers (a repository runs one job)
PG_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS ferry_github_jobs (
        delivery TEXT PRIMARY KEY, repo TEXT NOT NULL, state TEXT NOT NULL, trigger TEXT NOT NULL,
        created DOUBLE PRECISION NOT NULL, started DOUBLE PRECISION, finished DOUBLE PRECISION, outcome TEXT,
        attempt INTEGER NOT NULL DEFAULT 0, cancel INTEGER NOT NULL DEFAULT 0, payload_key TEXT UNIQUE,
        seq BIGSERIAL, lease_owner TEXT, lease_until DOUBLE PRECISION)""",
    "CREATE INDEX IF NOT EXISTS ferry_github_jobs_repo_state ON ferry_github_jobs (repo, state)",
)


class PgGitHubStore(GitHubStore):
    """The jobs in the Postgres database of ``$FERRY_SERVICE_DATABASE``, shared by the servers using it."""

    def __init__(self, path: Path, url: str | None = None, lease_s: float = GITHUB_LEASE_S) -> None:
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        self.url = url or settings().service.service_database or ""
        self.host = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.lease_s = lease_s
        self._held: dict[str, int] = {}  # delivery -> the attempt this server claimed
        self._lock = threading.Lock()
        self._pool: ConnectionPool[Any] = ConnectionPool(pg_conninfo(self.url), min_size=1, max_size=4, open=True,
                                                    kwargs={"autocommit": True, "row_factory": dict_row,
                                                            "prepare_threshold": None})
        with self._pool.connection() as db, db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(%s)", (PG_CLAIM_LOCK_KEY,))
            for statement in PG_SCHEMA:
                db.execute(statement)
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="ferry-github-leases", daemon=True)
        self._beat.start()

    def close(self) -> None:
        self._stop.set()
        self._beat.join(timeout=5)
        self._pool.close()

    def _all(self, query: str, args: Any = ()) -> list[dict[str, Any]]:
        with self._pool.connection() as db, db.transaction():
            return list(db.execute(query, args).fetchall())

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                lost = self.renew()
                cancelled = self.cancelled_held()
                hook = self.on_stop
                if hook is not None:
                    for delivery in sorted(lost | cancelled):
                        hook(delivery, delivery in lost)
                self.requeue_running()
            except Exception as exc:  # the database is away: renewed at the next beat
                logger.warning("the GitHub jobs' lease heartbeat failed: %s: %s", type(exc).__name__, exc)

    def renew(self) -> set[str]:
        """This server's leases extended; returns the deliveries whose lease is lost."""
        with self._lock:
            held = dict(self._held)
        if not held:
            return set()
        rows = self._all(f"UPDATE ferry_github_jobs SET lease_until={PG_NOW} + %s WHERE delivery = ANY(%s) AND "
                         "state='running' AND lease_owner=%s RETURNING delivery, attempt",
                         (self.lease_s, list(held), self.host))
        kept = {r["delivery"] for r in rows if r["attempt"] == held[r["delivery"]]}
        return set(held) - kept

    def cancelled_held(self) -> set[str]:
        """The jobs this server runs that a cancel (on any server) asked to stop."""
        with self._lock:
            held = list(self._held)
        if not held:
            return set()
        rows = self._all("SELECT delivery FROM ferry_github_jobs WHERE delivery = ANY(%s) AND cancel=1 AND "
                         "state='running' AND lease_owner=%s", (held, self.host))
        return {r["delivery"] for r in rows}

    def add(self, trigger: Trigger) -> tuple[bool, int]:
        with self._pool.connection() as db, db.transaction():
            cur = db.execute("INSERT INTO ferry_github_jobs (delivery, repo, state, trigger, created, payload_key) "
                             "VALUES (%s, %s, 'queued', %s, %s, %s) ON CONFLICT DO NOTHING",
                             (trigger.delivery, trigger.full_name, trigger.model_dump_json(), time.time(),
                              trigger.payload_key))
            if cur.rowcount == 0:
                return False, 0
            row = db.execute("SELECT count(*) AS n FROM ferry_github_jobs WHERE repo=%s AND state IN ('queued', "
                             "'running') AND delivery != %s", (trigger.full_name, trigger.delivery)).fetchone()
            return True, int(row["n"] if row else 0)

    def claim(self) -> JobRow | None:
        """The oldest queued job whose repository has none running, now ``running`` under this server's
        lease (claims are serialised by an advisory lock: two servers never start two jobs of one
        repository)."""
        with self._pool.connection() as db, db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(%s)", (PG_CLAIM_LOCK_KEY,))
            row = db.execute(
                "UPDATE ferry_github_jobs SET state='running', started=%s, attempt=attempt+1, lease_owner=%s, "
                f"lease_until={PG_NOW} + %s WHERE delivery = (SELECT delivery FROM ferry_github_jobs WHERE "
                "state='queued' AND repo NOT IN (SELECT repo FROM ferry_github_jobs WHERE state='running') "
                "ORDER BY created, seq LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING *",
                (time.time(), self.host, self.lease_s)).fetchone()
        if row is None:
            return None
        with self._lock:
            self._held[row["delivery"]] = int(row["attempt"])
        return _job(row)

    def finish(self, delivery: str, state: JobState, outcome: str) -> None:
        with self._lock:
            attempt = self._held.pop(delivery, None)
        guard, args = ("", []) if attempt is None else (" AND attempt=%s AND lease_owner=%s", [attempt, self.host])
        rows = self._all(f"UPDATE ferry_github_jobs SET state=%s, finished=%s, outcome=%s, lease_owner=NULL, "
                         f"lease_until=NULL WHERE delivery=%s{guard} RETURNING delivery",
                         [state, time.time(), outcome[:4000], delivery, *args])
        if not rows:
            logger.warning("GitHub job %s: this server's lease on it was lost; its end is another server's to "
                           "record", delivery)

    def requeue_running(self) -> list[str]:
        """The running jobs whose server let its lease run out, queued again (each once: the row lock makes
        a second server's same statement find nothing)."""
        rows = self._all("WITH gone AS (SELECT delivery FROM ferry_github_jobs WHERE state='running' AND cancel=0 "
                         f"AND lease_until < {PG_NOW} FOR UPDATE SKIP LOCKED) UPDATE ferry_github_jobs j SET "
                         "state='queued', started=NULL, lease_owner=NULL, lease_until=NULL FROM gone WHERE "
                         "j.delivery=gone.delivery RETURNING j.delivery")
        return [r["delivery"] for r in rows]

    def cancelled_at_restart(self) -> list[JobRow]:
        rows = self._all("UPDATE ferry_github_jobs SET state='cancelled', finished=%s, outcome='cancelled (the "
                         "server stopped before the job did)', lease_owner=NULL WHERE state='running' AND cancel=1 "
                         f"AND lease_until < {PG_NOW} RETURNING *", (time.time(),))
        return [_job(r) for r in rows]

    def request_cancel(self, delivery: str) -> JobState | None:
        with self._pool.connection() as db, db.transaction():
            row = db.execute("SELECT state FROM ferry_github_jobs WHERE delivery=%s FOR UPDATE", (delivery,)).fetchone()
            if row is None:
                return None
            if row["state"] == "queued":
                db.execute("UPDATE ferry_github_jobs SET state='cancelled', cancel=1, finished=%s, outcome='cancelled "
                           "before it started' WHERE delivery=%s", (time.time(), delivery))
            elif row["state"] == "running":
                db.execute("UPDATE ferry_github_jobs SET cancel=1 WHERE delivery=%s", (delivery,))
            was: JobState = row["state"]
            return was

    def cancel_requested(self, delivery: str) -> bool:
        rows = self._all("SELECT cancel FROM ferry_github_jobs WHERE delivery=%s", (delivery,))
        return bool(rows and rows[0]["cancel"])

    def get(self, delivery: str) -> JobRow | None:
        rows = self._all("SELECT * FROM ferry_github_jobs WHERE delivery=%s", (delivery,))
        return _job(rows[0]) if rows else None

    def view(self, delivery: str) -> JobView | None:
        rows = self._all("SELECT * FROM ferry_github_jobs WHERE delivery=%s", (delivery,))
        return _view(rows[0]) if rows else None

    def views(self, *, repo: str | None = None, state: JobState | None = None, limit: int = 50,
              offset: int = 0) -> tuple[int, list[JobView]]:
        where, args = [], []
        if repo is not None:
            where.append("repo=%s")
            args.append(repo)
        if state is not None:
            where.append("state=%s")
            args.append(state)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        total = self._all(f"SELECT count(*) AS n FROM ferry_github_jobs{clause}", args)[0]["n"]
        rows = self._all(f"SELECT * FROM ferry_github_jobs{clause} ORDER BY created DESC, seq DESC LIMIT %s "
                         "OFFSET %s", [*args, limit, offset])
        return int(total), [_view(r) for r in rows]
