"""Fixes that resolved earlier migrations: the eval harness records them, the knowledge base indexes them.

One SQLite table ``fixes`` in ``fixes.sqlite`` of the knowledge-base directory (kept across index
rebuilds; the index is rebuilt when it changes). Several processes may record at once: SQLite's own
locking serialises the writes.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

from agent.knowledge.sources import MAX_EXAMPLE_CHARS, Document, code_terms

FIXES_FILE = "fixes.sqlite"
MAX_DIFF_CHARS = 4000
SCHEMA = """CREATE TABLE IF NOT EXISTS fixes (
    id INTEGER PRIMARY KEY AUTOINCREMENT, case_name TEXT NOT NULL, signature TEXT NOT NULL,
    exception TEXT NOT NULL, rule TEXT NOT NULL, diff TEXT NOT NULL, reason TEXT NOT NULL,
    recorded_at REAL NOT NULL)"""


@dataclass(frozen=True)
class FixRecord:
    id: int
    case_name: str
    signature: str
    exception: str
    rule: str
    diff: str
    reason: str

    def document(self) -> Document:
        body = f"Earlier fix in {self.case_name}: {self.exception}\n{self.reason}".strip()
        return Document("earlier_fix", f"fix:{self.id}", f"earlier fix by {self.rule} in {self.case_name} "
                        f"({self.signature})", body,
                        f"{self.signature} {self.rule} {code_terms(self.exception)} {code_terms(self.diff)}",
                        self.diff, self.diff[:MAX_EXAMPLE_CHARS])


@contextmanager
def _connect(kb_dir: Path) -> Iterator[sqlite3.Connection]:
    kb_dir.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(kb_dir / FIXES_FILE, timeout=30)) as conn:
        conn.execute(SCHEMA)
        yield conn


def record_fix(kb_dir: Path, *, case: str, signature: str, exception: str, rule: str, diff: str,
               reason: str = "") -> int:
    """Record that ``rule`` (a policy rule's id, or ``llm``) resolved ``case``, whose failure had the
    trace ``signature`` (kind) and ``exception`` ("Type: message"), with ``diff``; returns its id."""
    with _connect(kb_dir) as conn, conn:
        cur = conn.execute(
            "INSERT INTO fixes (case_name, signature, exception, rule, diff, reason, recorded_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (case, signature, exception, rule, diff[:MAX_DIFF_CHARS], reason, time.time()))
        return int(cur.lastrowid or 0)


def all_fixes(kb_dir: Path) -> list[FixRecord]:
    if not (kb_dir / FIXES_FILE).is_file():
        return []
    with _connect(kb_dir) as conn:
        rows = conn.execute("SELECT id, case_name, signature, exception, rule, diff, reason FROM fixes "
                            "ORDER BY id").fetchall()
    return [FixRecord(*row) for row in rows]


def fixes_key(kb_dir: Path) -> str:
    """What of the fixes table keys the index: its row count and last id."""
    if not (kb_dir / FIXES_FILE).is_file():
        return "0:0"
    with _connect(kb_dir) as conn:
        count, last = conn.execute("SELECT count(*), coalesce(max(id), 0) FROM fixes").fetchone()
    return f"{count}:{last}"
