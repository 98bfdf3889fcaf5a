"""One write transaction on an SQLite connection that threads share (the service's and the PR bot's tables)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager


@contextmanager
def immediate(db: sqlite3.Connection, lock: AbstractContextManager[object]) -> Iterator[sqlite3.Connection]:
    """One write transaction (BEGIN IMMEDIATE) on a connection shared by threads: committed, or rolled
    back on any error."""
    with lock:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
