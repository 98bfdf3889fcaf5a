"""Where a migration's checkpoints go: LangGraph's SQLite saver, or Postgres when configured.

SQLite (``<state dir>/checkpoints.sqlite``) by default; Postgres when ``FERRY_DATABASE_URL`` names
one (the ``postgres`` extra). Every super-step is written synchronously (``agent.migration.driver.drive``), so
a migration killed at any point resumes from its last finished node. A store that cannot be used
is :class:`~agent.errors.ToolUnavailable` with a message that says what to fix; Ferry never falls
back from Postgres to SQLite silently.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.errors import ToolUnavailable
from agent.redact import redact_dsn, scrub
from agent.settings import settings

if TYPE_CHECKING:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

logger = logging.getLogger(__name__)

DATABASE_URL_ENV = "FERRY_DATABASE_URL"

# Postgres: one advisory-lock key serialises the table setup of processes that start together.
PG_SETUP_LOCK_KEY = 0x46455252  # "FERR"
PG_SETUP_WAIT_S = 60.0
PG_CONNECT_TIMEOUT_S = 10
SQLITE_FILE = "checkpoints.sqlite"


def database_url() -> str | None:
    """The Postgres URL in FERRY_DATABASE_URL, or None (checkpoints go to SQLite)."""
    url = settings().paths.database_url
    if not url:
        return None
    if not url.startswith(("postgres://", "postgresql://")):
        raise ToolUnavailable(
            f"{DATABASE_URL_ENV} must be a postgresql:// URL (postgresql://USER:PASSWORD@HOST:PORT/DBNAME), "
            f"got {redact_dsn(url)!r}; fix it, or unset {DATABASE_URL_ENV} to keep checkpoints in SQLite "
            "under the state dir")
    return url


def describe_store(state_directory: Path) -> str:
    """Where the checkpoints are, in words (for messages)."""
    url = database_url()
    return f"the Postgres database {redact_dsn(url)}" if url else str(state_directory / SQLITE_FILE)


@contextlib.contextmanager
def checkpointer(state_directory: Path) -> Iterator[Any]:
    """SQLite saver under the state dir, or Postgres when FERRY_DATABASE_URL is set.

    Raises :class:`~agent.errors.ToolUnavailable` (status ``failed_tool_unavailable``) when the
    Postgres extra is not installed, the server cannot be reached or the tables cannot be created.
    """
    url = database_url()
    if url:
        with _postgres_saver(url) as saver:
            yield saver
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(state_directory / SQLITE_FILE), check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        yield saver
    finally:
        conn.close()


@contextlib.contextmanager
def _postgres_saver(url: str) -> Iterator[Any]:
    try:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row
    except ImportError as exc:
        raise ToolUnavailable(
            f"{DATABASE_URL_ENV} names a Postgres database but langgraph-checkpoint-postgres / psycopg is not "
            f"installed ({exc}); install Ferry's 'postgres' extra (pip install -e '.[postgres]'), or unset "
            f"{DATABASE_URL_ENV} to keep checkpoints in SQLite under the state dir") from exc
    where = redact_dsn(url)
    try:
        # The options PostgresSaver relies on: autocommit (each write is durable at once),
        # no server-side prepared statements (safe behind poolers), rows as dicts.
        conn = psycopg.Connection.connect(pg_conninfo(url), autocommit=True, prepare_threshold=0, row_factory=dict_row)
    except psycopg.Error as exc:
        raise ToolUnavailable(
            f"cannot connect to the Postgres database {where} named by {DATABASE_URL_ENV}: {one_line(exc)}; "
            "start the server or fix the URL (postgresql://USER:PASSWORD@HOST:PORT/DBNAME), or unset "
            f"{DATABASE_URL_ENV} to keep checkpoints in SQLite under the state dir") from exc
    with conn:
        saver = PostgresSaver(conn)
        try:
            _setup_postgres(saver, conn)
        except psycopg.Error as exc:
            raise ToolUnavailable(
                f"cannot create Ferry's checkpoint tables in {where}: {one_line(exc)}; the user in "
                f"{DATABASE_URL_ENV} needs the CREATE privilege on that database") from exc
        logger.debug("checkpoints in Postgres %s", where)
        yield saver


def _setup_postgres(saver: PostgresSaver, conn: psycopg.Connection[dict[str, Any]]) -> None:
    """``saver.setup()`` under an advisory lock: PostgresSaver's setup is not safe when two
    processes run it at once (duplicate table types, duplicate migration versions)."""
    deadline = time.monotonic() + PG_SETUP_WAIT_S
    # try-lock in a loop rather than a blocking lock: a session blocked inside a statement would
    # hold a snapshot that the holder's CREATE INDEX CONCURRENTLY waits for (a deadlock).
    while not (conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (PG_SETUP_LOCK_KEY,)).fetchone() or {}).get("ok"):
        if time.monotonic() > deadline:
            raise ToolUnavailable(
                f"another process has been creating Ferry's checkpoint tables for {PG_SETUP_WAIT_S:.0f} s; "
                "check the database for a stuck session (pg_stat_activity) and try again")
        time.sleep(0.05)
    try:
        saver.setup()
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (PG_SETUP_LOCK_KEY,))


def pg_conninfo(url: str) -> str:
    """The connection string for ``url``, with Ferry's connect timeout unless the URL sets one."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    return url if "connect_timeout" in conninfo_to_dict(url) else make_conninfo(url,
                                                                                connect_timeout=PG_CONNECT_TIMEOUT_S)


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (for messages that quote a driver's error), with the secrets of
    FERRY_DATABASE_URL and anything shaped like a credential hidden (a driver may quote its input)."""
    return scrub(" ".join(str(exc).split()), settings().paths.database_url)


def migration_ids(state_directory: Path) -> list[str]:
    """Migration ids that have checkpoints in the store in use (newest first)."""
    if database_url():
        with checkpointer(state_directory) as saver:  # checkpoint ids are time-ordered (uuid6)
            rows = saver.conn.execute("SELECT thread_id, MAX(checkpoint_id) AS last FROM checkpoints "
                                      "GROUP BY thread_id ORDER BY last DESC").fetchall()
        return [r["thread_id"] for r in rows]
    db = state_directory / SQLITE_FILE
    if not db.exists():
        return []
    with contextlib.closing(sqlite3.connect(str(db))) as conn:
        try:
            query = "SELECT thread_id, MAX(rowid) FROM checkpoints GROUP BY thread_id ORDER BY 2 DESC"
            return [r[0] for r in conn.execute(query).fetchall()]
        except sqlite3.Error:
            return []
