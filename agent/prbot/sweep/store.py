"""The sweep's memory, a table of the bot's own ``github.db``: per repository, the default branch's commit
it was last swept at and how that ended (a scan without findings, the pull request opened...)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from pydantic import BaseModel

from agent.sqlite_tx import immediate

SCHEMA = """
CREATE TABLE IF NOT EXISTS sweep_repos (
    repo TEXT PRIMARY KEY,
    sha TEXT NOT NULL,
    outcome TEXT NOT NULL,
    reason TEXT NOT NULL,
    pr_url TEXT,
    swept REAL NOT NULL
);
"""


class Swept(BaseModel):
    repo: str
    sha: str
    outcome: str
    reason: str
    pr_url: str | None = None
    swept: float


class SweepStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        self._db.close()

    def get(self, repo: str) -> Swept | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM sweep_repos WHERE repo = ?", (repo.lower(),)).fetchone()
        return None if row is None else Swept(**dict(row))

    def record(self, repo: str, sha: str, outcome: str, reason: str, pr_url: str | None) -> None:
        with immediate(self._db, self._lock) as db:
            db.execute("INSERT INTO sweep_repos (repo, sha, outcome, reason, pr_url, swept) VALUES (?, ?, ?, ?, ?, ?) "
                       "ON CONFLICT (repo) DO UPDATE SET sha = excluded.sha, outcome = excluded.outcome, "
                       "reason = excluded.reason, pr_url = excluded.pr_url, swept = excluded.swept",
                       (repo.lower(), sha, outcome, reason[:2000], pr_url, time.time()))
