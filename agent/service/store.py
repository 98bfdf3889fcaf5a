"""The service's own records: sessions (the durable queue) and their events, in SQLite.

One writer connection behind a lock (the service is one process; a second server on the same data dir is
refused by :func:`agent.service.lock.hold_data_dir`). Each row is committed with ``synchronous=FULL``
before the request that made it is answered, so an accepted session survives kill -9 of the server.

Events have a per-session integer id (what SSE sends as ``id:``) and, for those derived from the
migration's checkpointed state, a unique ``key``: recording them again (after a restart, from the
state) adds only those that were missing, never a duplicate.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.service.schemas import SessionOptions, SessionSource, SessionState
from agent.sqlite_tx import immediate

logger = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    state TEXT NOT NULL,
    status TEXT,
    summary TEXT,
    step TEXT,
    options TEXT NOT NULL,
    source TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    answer TEXT,
    cancel INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    queued_at REAL
);
CREATE INDEX IF NOT EXISTS sessions_owner ON sessions(owner, created_at);
CREATE INDEX IF NOT EXISTS sessions_queue ON sessions(state, queued_at);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    id INTEGER NOT NULL,
    key TEXT,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (session_id, id),
    UNIQUE (session_id, key)
);
"""

ENDED: frozenset[SessionState] = frozenset({"finished", "failed", "cancelled"})
WAITING = "SELECT count(*) FROM sessions WHERE state='queued' AND cancel=0"


class QueueFull(RuntimeError):
    def __init__(self, waiting: int) -> None:
        super().__init__(f"{waiting} sessions are already waiting for a worker")
        self.waiting = waiting


class LeaseLost(RuntimeError):
    """This host's claim on a session is over (Postgres: its lease ran out and the session was queued again
    for another host): stop, write nothing more."""

    def __init__(self, sid: str, fence: int) -> None:
        super().__init__(f"session {sid}: the lease of claim {fence} is lost (another host has it now)")
        self.sid, self.fence = sid, fence


@dataclass(frozen=True)
class SessionRow:
    id: str
    owner: str
    state: SessionState
    status: str | None
    summary: str | None
    step: str | None
    options: SessionOptions
    source: SessionSource
    attempt: int
    answer: dict[str, Any] | None
    cancel: bool
    error: str | None
    created_at: float
    updated_at: float
    fence: int = 0  # the claim's number (Postgres: each claim adds one; a write naming an older one is refused)

    @property
    def migration_id(self) -> str:
        """The graph's thread id of the current attempt (a retry or changed options start a new one)."""
        return self.id if self.attempt == 1 else f"{self.id}-a{self.attempt}"


@dataclass(frozen=True)
class EventRow:
    id: int
    kind: str
    data: dict[str, Any]
    created_at: float


def session_row(r: Any) -> SessionRow:
    """A session from a database row (sqlite3.Row, or a dict from Postgres)."""
    return SessionRow(id=r["id"], owner=r["owner"], state=r["state"], status=r["status"], summary=r["summary"],
                      step=r["step"], options=SessionOptions.model_validate_json(r["options"]),
                      source=SessionSource.model_validate_json(r["source"]), attempt=r["attempt"],
                      answer=json.loads(r["answer"]) if r["answer"] else None, cancel=bool(r["cancel"]),
                      error=r["error"], created_at=r["created_at"], updated_at=r["updated_at"],
                      fence=int(r["fence"]) if "fence" in r.keys() else 0)  # noqa: SIM118 - a Row's `in` reads values


def encoded_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """A row update's values as stored: the answer as JSON, the options as their model's JSON, ``updated_at``
    now."""
    encoded = dict(fields)
    if encoded.get("answer") is not None:
        encoded["answer"] = json.dumps(encoded["answer"])
    if "options" in encoded:
        encoded["options"] = encoded["options"].model_dump_json()
    encoded["updated_at"] = time.time()
    return encoded


def _assignments(fields: dict[str, Any]) -> tuple[str, list[Any]]:
    """``col=?, ...`` and the values of a row update."""
    encoded = encoded_fields(fields)
    return ", ".join(f"{k}=?" for k in encoded), list(encoded.values())


class SessionStore:
    """One host's sessions in SQLite. ``fence`` arguments (the Postgres store's guard against a host whose
    lease ran out) are accepted and need no check here: one server holds the data dir."""

    leases = False  # no leases: a dead server's sessions are requeued when the next one starts

    def __init__(self, path: Path) -> None:
        self.path: Path | None = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)
        # the newest event id of each session, read by stream readers without a query
        self._last: dict[str, int] = {}
        self.changed = threading.Condition(self._lock)  # notified on every new queued session or event

    def describe(self) -> str:
        return str(self.path.name if self.path else "")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        return immediate(self._db, self._lock)

    def ping(self) -> None:
        with self._lock:
            self._db.execute("SELECT count(*) FROM sessions").fetchone()

    # -- sessions -------------------------------------------------------------------------------

    def waiting(self) -> int:
        with self._lock:
            return int(self._db.execute(WAITING).fetchone()[0])

    def create(self, sid: str, owner: str, options: SessionOptions, source: SessionSource, queue_limit: int) -> None:
        now = time.time()
        with self._tx() as db:
            waiting = int(db.execute(WAITING).fetchone()[0])
            if waiting >= queue_limit:
                raise QueueFull(waiting)
            db.execute("INSERT INTO sessions (id, owner, state, options, source, created_at, updated_at, queued_at) "
                       "VALUES (?, ?, 'queued', ?, ?, ?, ?, ?)",
                       (sid, owner, options.model_dump_json(), source.model_dump_json(), now, now, now))
            self._event(db, sid, "queued", {"position": waiting + 1}, key="a1:queued")
        self.notify()

    def get(self, sid: str, owner: str | None = None) -> SessionRow | None:
        with self._lock:
            r = self._db.execute("SELECT * FROM sessions WHERE id=?", (sid,)).fetchone()
        if r is None or (owner is not None and r["owner"] != owner):
            return None
        return session_row(r)

    def sessions(self, owner: str, state: SessionState | None, limit: int, offset: int) -> tuple[list[SessionRow], int]:
        where, args = "owner=?", [owner]
        if state is not None:
            where += " AND state=?"
            args.append(state)
        with self._lock:
            total = int(self._db.execute(f"SELECT count(*) FROM sessions WHERE {where}", args).fetchone()[0])
            rows = self._db.execute(f"SELECT * FROM sessions WHERE {where} ORDER BY created_at DESC, id "
                                    "LIMIT ? OFFSET ?", [*args, limit, offset]).fetchall()
        return [session_row(r) for r in rows], total

    def update(self, sid: str, *, fence: int | None = None, **fields: Any) -> None:
        cols, values = _assignments(fields)
        with self._tx() as db:
            db.execute(f"UPDATE sessions SET {cols} WHERE id=?", [*values, sid])

    def requeue(self, sid: str, *, expect: tuple[SessionState, ...], queue_limit: int | None = None,
                event: tuple[str, dict[str, Any]] | None = None, fence: int | None = None, **fields: Any) -> bool:
        """Back into the queue (an answer to resume with, a new attempt), with the event that says why; only
        from one of the ``expect`` states and not cancelled (compare-and-set: of two answers at once, one
        wins; False for the other). ``queue_limit``: QueueFull when that many already wait."""
        cols, values = _assignments({**fields, "state": "queued", "queued_at": time.time()})
        marks = ", ".join("?" for _ in expect)
        with self._tx() as db:
            if queue_limit is not None:
                waiting = int(db.execute(WAITING).fetchone()[0])
                if waiting >= queue_limit:
                    raise QueueFull(waiting)
            done = db.execute(f"UPDATE sessions SET {cols} WHERE id=? AND cancel=0 AND state IN ({marks})",
                              [*values, sid, *expect]).rowcount
            if done and event is not None:
                self._event(db, sid, event[0], event[1])
        self.notify()
        return bool(done)

    def claim(self) -> SessionRow | None:
        """The oldest queued session, now ``running``; None when none waits."""
        with self._tx() as db:
            r = db.execute("SELECT id FROM sessions WHERE state='queued' AND cancel=0 "
                           "ORDER BY queued_at, created_at LIMIT 1").fetchone()
            if r is None:
                return None
            db.execute("UPDATE sessions SET state='running', updated_at=? WHERE id=?", (time.time(), r["id"]))
        got = self.get(r["id"])
        assert got is not None
        return got

    def renew(self, held: dict[str, int]) -> tuple[set[str], set[str]]:
        """No leases in SQLite: nothing is lost, cancels reach the worker directly."""
        return set(), set()

    def requeue_expired(self) -> list[str]:
        """No leases in SQLite (:meth:`interrupted` requeues at start)."""
        return []

    def interrupted(self) -> tuple[list[str], list[SessionRow]]:
        """Sessions a previous server left ``running`` (killed, crashed) go back to the queue's head; those
        a DELETE had asked to stop (running or queued) are returned to be finished as cancelled."""
        with self._tx() as db:
            ids = [r["id"] for r in db.execute("SELECT id FROM sessions WHERE state='running' AND cancel=0")]
            db.execute("UPDATE sessions SET state='queued' WHERE state='running' AND cancel=0")
            stopped = [session_row(r) for r in db.execute("SELECT * FROM sessions WHERE cancel=1 AND state IN "
                                                   "('running', 'queued', 'waiting_for_approval')")]
        return ids, stopped

    def finish(self, sid: str, event: tuple[str, dict[str, Any], str | None], *, fence: int | None = None,
               **fields: Any) -> None:
        """The row's end state and the event that says so, in one transaction (a kill between the two
        cannot lose the event)."""
        cols, values = _assignments(fields)
        with self._tx() as db:
            db.execute(f"UPDATE sessions SET {cols} WHERE id=?", [*values, sid])
            self._event(db, sid, event[0], event[1], event[2])
        self.notify()

    def counts(self, sid: str) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute("SELECT kind, count(*) FROM events WHERE session_id=? GROUP BY kind",
                                    (sid,)).fetchall()
        by = {r[0]: int(r[1]) for r in rows}
        return {"steps": by.get("step", 0), "edits": by.get("edit", 0), "runs": by.get("run", 0),
                "messages": by.get("message", 0), "events": sum(by.values())}

    # -- events ---------------------------------------------------------------------------------

    def _event(self, db: sqlite3.Connection, sid: str, kind: str, data: dict[str, Any], key: str | None = None) -> int:
        if key is not None and db.execute("SELECT 1 FROM events WHERE session_id=? AND key=?",
                                          (sid, key)).fetchone():
            return 0
        nxt = int(db.execute("SELECT coalesce(max(id), 0) + 1 FROM events WHERE session_id=?", (sid,)).fetchone()[0])
        db.execute("INSERT INTO events (session_id, id, key, kind, data, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                   (sid, nxt, key, kind, json.dumps(data, default=str), time.time()))
        self._last[sid] = nxt
        return nxt

    def add_events(self, sid: str, events: list[tuple[str, str | None, dict[str, Any]]], *,
                   fence: int | None = None) -> list[int]:
        """Record ``(kind, key, data)`` events in order; an already recorded key is skipped (id 0 for it)."""
        if not events:
            return []
        with self._tx() as db:
            ids = [self._event(db, sid, kind, data, key) for kind, key, data in events]
        self.notify()
        return ids

    def add_event(self, sid: str, kind: str, data: dict[str, Any], key: str | None = None, *,
                  fence: int | None = None) -> int:
        return self.add_events(sid, [(kind, key, data)], fence=fence)[0]

    def events_after(self, sid: str, after: int, limit: int = 500) -> list[EventRow]:
        with self._lock:
            rows = self._db.execute("SELECT id, kind, data, created_at FROM events WHERE session_id=? AND id>? "
                                    "ORDER BY id LIMIT ?", (sid, after, limit)).fetchall()
        return [EventRow(id=r["id"], kind=r["kind"], data=json.loads(r["data"]), created_at=r["created_at"])
                for r in rows]

    def last_event(self, sid: str) -> int:
        """The newest event id of a session (cached: readers poll it without touching the database)."""
        if sid in self._last:
            return self._last[sid]
        with self._lock:
            value = int(self._db.execute("SELECT coalesce(max(id), 0) FROM events WHERE session_id=?",
                                         (sid,)).fetchone()[0])
        self._last[sid] = value
        return value

    def notify(self) -> None:
        with self.changed:
            self.changed.notify_all()
