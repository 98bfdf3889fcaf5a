"""The service's records in PostgreSQL, shared by several ``ferry serve`` hosts (``--database``).

The same sessions and events as :class:`agent.service.store.SessionStore` (tables ``ferry_sessions`` and
``ferry_events``, beside the checkpoints in the same database), with what several hosts need:

* the queue is claimed with ``SELECT ... FOR UPDATE SKIP LOCKED``: two hosts claiming at once take two
  different sessions, never one twice;
* a claimed session carries a lease: the host that holds it (``lease_owner``) and until when
  (``lease_until``, on the database's clock, so hosts' clocks do not matter), renewed by that host's
  heartbeat (:meth:`PgSessionStore.renew`);
* a session whose lease ran out (its host died or lost the database) is queued again by whichever host
  sees it first (:meth:`PgSessionStore.requeue_expired`): one ``UPDATE ... WHERE state='running' AND
  lease_until < now`` whose row lock makes a second host's identical statement find nothing, so it is
  requeued exactly once, with one ``requeued`` event;
* every claim increments the session's ``fence``. A worker's writes name the fence of its claim; a write
  whose fence is no longer the row's (another host claimed the session since) changes nothing and raises
  :class:`LeaseLost`, so a host that comes back from a pause cannot clobber the new owner's work.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from agent.migration.facade import one_line, pg_conninfo
from agent.redact import redact_dsn
from agent.service.schemas import SessionOptions, SessionSource, SessionState
from agent.service.store import EventRow, LeaseLost, QueueFull, SessionRow, SessionStore, encoded_fields, session_row

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

logger = logging.getLogger(__name__)

NOW = "extract(epoch from clock_timestamp())"
POOL_MAX = 8
SETUP_LOCK_KEY = 0x46455253  # "FERS": one host at a time creates the tables
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS ferry_sessions (
        id TEXT PRIMARY KEY, owner TEXT NOT NULL, state TEXT NOT NULL, status TEXT, summary TEXT, step TEXT,
        options TEXT NOT NULL, source TEXT NOT NULL, attempt INTEGER NOT NULL DEFAULT 1, answer TEXT,
        cancel INTEGER NOT NULL DEFAULT 0, error TEXT, created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL, queued_at DOUBLE PRECISION, fence BIGINT NOT NULL DEFAULT 0,
        lease_owner TEXT, lease_until DOUBLE PRECISION)""",
    "CREATE INDEX IF NOT EXISTS ferry_sessions_owner ON ferry_sessions (owner, created_at)",
    "CREATE INDEX IF NOT EXISTS ferry_sessions_queue ON ferry_sessions (state, queued_at)",
    """CREATE TABLE IF NOT EXISTS ferry_events (
        session_id TEXT NOT NULL, id INTEGER NOT NULL, key TEXT, kind TEXT NOT NULL, data TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (session_id, id), UNIQUE (session_id, key))""",
)
WAITING = "SELECT count(*) AS n FROM ferry_sessions WHERE state='queued' AND cancel=0"


class DatabaseUnavailable(RuntimeError):
    """The service's Postgres database cannot be used; the message says what to fix."""


def _pool(url: str) -> ConnectionPool:
    try:
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool
    except ImportError as exc:
        raise DatabaseUnavailable(f"--database names a Postgres database but psycopg / psycopg-pool is not "
                                  f"installed ({exc}); install Ferry's 'postgres' extra") from exc
    pool: ConnectionPool = ConnectionPool(pg_conninfo(url), min_size=1, max_size=POOL_MAX, open=False,
                                          kwargs={"autocommit": True, "row_factory": dict_row,
                                                  "prepare_threshold": None})
    try:
        pool.open(wait=True, timeout=30)
    except Exception as exc:
        pool.close()
        raise DatabaseUnavailable(f"cannot connect to the service database {redact_dsn(url)}: "
                                  f"{one_line(exc)}; start the server or fix --database") from exc
    return pool


class PgSessionStore(SessionStore):
    """Sessions and events in Postgres; ``host`` names this server in the leases it takes."""

    leases = True

    def __init__(self, url: str, host: str, lease_s: float) -> None:
        self.url, self.host, self.lease_s = url, host, lease_s
        self.path = None
        self._lock = threading.RLock()
        self._last = {}
        self.changed = threading.Condition(self._lock)
        self._pool_ = _pool(url)
        with self._conn() as db, db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(%s)", (SETUP_LOCK_KEY,))
            for statement in SCHEMA:
                db.execute(statement)

    def _fence_args(self, fence: int | None) -> list[Any]:
        """The values of ``FENCED``: the claim's fence, held by this host, still running."""
        return [] if fence is None else [fence, self.host]

    def describe(self) -> str:
        return f"Postgres {redact_dsn(self.url)}"

    def close(self) -> None:
        self._pool_.close()

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        with self._pool_.connection() as conn:
            yield conn  # type: ignore[misc]

    @contextmanager
    def _tx_pg(self) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        with self._conn() as db, db.transaction():
            yield db

    def _one(self, query: str, args: Any = ()) -> dict[str, Any] | None:
        with self._conn() as db:
            row: dict[str, Any] | None = db.execute(query, args).fetchone()
            return row

    def ping(self) -> None:
        self._one("SELECT 1 AS ok")

    # -- sessions -------------------------------------------------------------------------------

    def waiting(self) -> int:
        row = self._one(WAITING)
        return int(row["n"]) if row else 0

    def create(self, sid: str, owner: str, options: SessionOptions, source: SessionSource, queue_limit: int) -> None:
        now = time.time()
        with self._tx_pg() as db:
            db.execute("LOCK TABLE ferry_sessions IN SHARE ROW EXCLUSIVE MODE")  # the limit holds across hosts
            waiting = int(_value(db.execute(WAITING).fetchone()))
            if waiting >= queue_limit:
                raise QueueFull(waiting)
            db.execute("INSERT INTO ferry_sessions (id, owner, state, options, source, created_at, updated_at, "
                       "queued_at) VALUES (%s, %s, 'queued', %s, %s, %s, %s, %s)",
                       (sid, owner, options.model_dump_json(), source.model_dump_json(), now, now, now))
            self._event_pg(db, sid, "queued", {"position": waiting + 1}, key="a1:queued")
        self.notify()

    def get(self, sid: str, owner: str | None = None) -> SessionRow | None:
        r = self._one("SELECT * FROM ferry_sessions WHERE id=%s", (sid,))
        if r is None or (owner is not None and r["owner"] != owner):
            return None
        return session_row(r)

    def sessions(self, owner: str, state: SessionState | None, limit: int, offset: int) -> tuple[list[SessionRow], int]:
        where, args = "owner=%s", [owner]
        if state is not None:
            where += " AND state=%s"
            args.append(state)
        with self._conn() as db:
            total = int(_value(db.execute(f"SELECT count(*) AS n FROM ferry_sessions WHERE {where}", args).fetchone()))
            rows = db.execute(f"SELECT * FROM ferry_sessions WHERE {where} ORDER BY created_at DESC, id "
                              "LIMIT %s OFFSET %s", [*args, limit, offset]).fetchall()
        return [session_row(r) for r in rows], total

    def update(self, sid: str, *, fence: int | None = None, **fields: Any) -> None:
        cols, values = _set(fields)
        with self._tx_pg() as db:
            done = db.execute(f"UPDATE ferry_sessions SET {cols} WHERE id=%s" + (FENCED if fence is not None else ""),
                              [*values, sid, *self._fence_args(fence)]).rowcount
            if fence is not None and not done:
                raise LeaseLost(sid, fence)

    def requeue(self, sid: str, *, expect: tuple[SessionState, ...], queue_limit: int | None = None,
                event: tuple[str, dict[str, Any]] | None = None, fence: int | None = None, **fields: Any) -> bool:
        """As SQLite's; ``fence``: only while this host's claim of that number holds it (a worker giving a
        session back)."""
        cols, values = _set({**fields, "state": "queued", "queued_at": time.time(), "lease_owner": None,
                             "lease_until": None})
        marks = ", ".join("%s" for _ in expect)
        with self._tx_pg() as db:
            if queue_limit is not None:
                db.execute("LOCK TABLE ferry_sessions IN SHARE ROW EXCLUSIVE MODE")
                waiting = int(_value(db.execute(WAITING).fetchone()))
                if waiting >= queue_limit:
                    raise QueueFull(waiting)
            done = db.execute(f"UPDATE ferry_sessions SET {cols} WHERE id=%s AND cancel=0 AND state IN ({marks})"
                              + (FENCED if fence is not None else ""),
                              [*values, sid, *expect, *self._fence_args(fence)]).rowcount
            if done and event is not None:
                self._event_pg(db, sid, event[0], event[1])
        self.notify()
        return bool(done)

    def claim(self) -> SessionRow | None:
        """The oldest queued session no other host is claiming right now, ``running`` under a new lease of
        this host and a new fence."""
        with self._tx_pg() as db:
            r = db.execute(
                "UPDATE ferry_sessions SET state='running', updated_at=%s, fence=fence+1, lease_owner=%s, "
                f"lease_until={NOW} + %s WHERE id = (SELECT id FROM ferry_sessions WHERE state='queued' AND "
                "cancel=0 ORDER BY queued_at, created_at LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING *",
                (time.time(), self.host, self.lease_s)).fetchone()
        return None if r is None else session_row(r)

    def renew(self, held: dict[str, int]) -> tuple[set[str], set[str]]:
        """Extend this host's leases on ``held`` (session id -> fence of its claim). Returns the sessions
        whose lease is lost (requeued or claimed elsewhere since) and those a DELETE asked to stop."""
        if not held:
            return set(), set()
        ids = list(held)
        with self._tx_pg() as db:
            rows = db.execute(f"UPDATE ferry_sessions SET lease_until={NOW} + %s WHERE id = ANY(%s) AND "
                              "state='running' AND lease_owner=%s RETURNING id, fence, cancel",
                              (self.lease_s, ids, self.host)).fetchall()
        kept = {r["id"]: r for r in rows if r["fence"] == held[r["id"]]}
        return set(ids) - set(kept), {sid for sid, r in kept.items() if r["cancel"]}

    def requeue_expired(self) -> list[str]:
        """Sessions whose lease ran out back at the queue's head, each once, with a ``requeued`` event."""
        with self._tx_pg() as db:
            rows = db.execute(
                "WITH gone AS (SELECT id, lease_owner FROM ferry_sessions WHERE state='running' AND cancel=0 AND "
                f"lease_until < {NOW} FOR UPDATE SKIP LOCKED) UPDATE ferry_sessions s SET state='queued', "
                "queued_at=s.created_at, updated_at=%s, lease_owner=NULL, lease_until=NULL FROM gone "
                "WHERE s.id=gone.id RETURNING s.id, s.attempt, s.fence, gone.lease_owner AS host",
                (time.time(),)).fetchall()
            for r in rows:
                self._event_pg(db, r["id"], "requeued", {"attempt": r["attempt"], "reason": "lease expired",
                                                              "host": r["host"]},
                               key=f"a{r['attempt']}:lease:{r['fence']}")
        if rows:
            logger.info("requeued %d session(s) whose host's lease ran out: %s", len(rows),
                        ", ".join(r["id"] for r in rows))
            self.notify()
        return [r["id"] for r in rows]

    def interrupted(self) -> tuple[list[str], list[SessionRow]]:
        """At start: the sessions whose host's lease ran out are queued again (a host's own sessions are
        never another's: each start is a new host id); those a DELETE asked to stop whose lease ran out
        (or that wait) are returned to be finished as cancelled."""
        again = self.requeue_expired()
        with self._conn() as db:
            rows = db.execute(f"SELECT * FROM ferry_sessions WHERE cancel=1 AND (state IN ('queued', "
                              f"'waiting_for_approval') OR (state='running' AND lease_until < {NOW}))").fetchall()
        return again, [session_row(r) for r in rows]

    def finish(self, sid: str, event: tuple[str, dict[str, Any], str | None], *, fence: int | None = None,
               **fields: Any) -> None:
        cols, values = _set({**fields, "lease_owner": None, "lease_until": None})
        with self._tx_pg() as db:
            done = db.execute(f"UPDATE ferry_sessions SET {cols} WHERE id=%s" + (FENCED if fence is not None else ""),
                              [*values, sid, *self._fence_args(fence)]).rowcount
            if fence is not None and not done:
                raise LeaseLost(sid, fence)
            self._event_pg(db, sid, event[0], event[1], event[2])
        self.notify()

    def counts(self, sid: str) -> dict[str, int]:
        with self._conn() as db:
            rows = db.execute("SELECT kind, count(*) AS n FROM ferry_events WHERE session_id=%s GROUP BY kind",
                              (sid,)).fetchall()
        by = {r["kind"]: int(r["n"]) for r in rows}
        return {"steps": by.get("step", 0), "edits": by.get("edit", 0), "runs": by.get("run", 0),
                "messages": by.get("message", 0), "events": sum(by.values())}

    # -- events ---------------------------------------------------------------------------------

    def _event_pg(self, db: psycopg.Connection[dict[str, Any]], sid: str, kind: str, data: dict[str, Any],
                  key: str | None = None) -> int:
        # the session's row lock orders the events of one session across hosts (ids 1, 2, 3... with no gap)
        db.execute("SELECT 1 FROM ferry_sessions WHERE id=%s FOR UPDATE", (sid,))
        if key is not None and db.execute("SELECT 1 FROM ferry_events WHERE session_id=%s AND key=%s",
                                          (sid, key)).fetchone():
            return 0
        nxt = int(_value(db.execute("SELECT coalesce(max(id), 0) + 1 AS n FROM ferry_events WHERE session_id=%s",
                                    (sid,)).fetchone()))
        db.execute("INSERT INTO ferry_events (session_id, id, key, kind, data, created_at) "
                   "VALUES (%s, %s, %s, %s, %s, %s)", (sid, nxt, key, kind, json.dumps(data, default=str), time.time()))
        return nxt

    def add_events(self, sid: str, events: list[tuple[str, str | None, dict[str, Any]]], *,
                   fence: int | None = None) -> list[int]:
        if not events:
            return []
        with self._tx_pg() as db:
            if fence is not None and db.execute(f"SELECT 1 FROM ferry_sessions WHERE id=%s{FENCED} FOR UPDATE",
                                                (sid, *self._fence_args(fence))).fetchone() is None:
                raise LeaseLost(sid, fence)
            ids = [self._event_pg(db, sid, kind, data, key) for kind, key, data in events]
        self.notify()
        return ids

    def events_after(self, sid: str, after: int, limit: int = 500) -> list[EventRow]:
        with self._conn() as db:
            rows = db.execute("SELECT id, kind, data, created_at FROM ferry_events WHERE session_id=%s AND id>%s "
                              "ORDER BY id LIMIT %s", (sid, after, limit)).fetchall()
        return [EventRow(id=r["id"], kind=r["kind"], data=json.loads(r["data"]), created_at=r["created_at"])
                for r in rows]

    def last_event(self, sid: str) -> int:
        """The newest event id of a session: asked of the database each time (another host may have added
        one)."""
        row = self._one("SELECT coalesce(max(id), 0) AS n FROM ferry_events WHERE session_id=%s", (sid,))
        return int(row["n"]) if row else 0


def _value(row: dict[str, Any] | None) -> Any:
    assert row is not None
    return next(iter(row.values()))


def _set(fields: dict[str, Any]) -> tuple[str, list[Any]]:
    encoded = encoded_fields(fields)
    return ", ".join(f"{k}=%s" for k in encoded), list(encoded.values())


FENCED = " AND fence=%s AND lease_owner=%s AND state='running'"
