"""The migration graph (LangGraph StateGraph) and its checkpointer.

ingest -> reference_run -> scan -> plan -> rewrite -> target_run -> (diagnose -> [llm_fix] ->
apply_fix -> target_run)* -> parity [-> [llm_fix] -> apply_fix -> target_run ...] -> tests
[-> diagnose ...] -> profile -> report.

The reference run goes on in the background from reference_run until target_run joins it; a
core permitting, target_run starts the tests beside itself and the tests node collects them
(``agent.background``).

Checkpoints go to SQLite (``<state dir>/checkpoints.sqlite``) by default, or to Postgres when
``FERRY_DATABASE_URL`` names one; every super-step is written synchronously, so a migration
killed at any point resumes from its last finished node.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from langgraph.graph import END, START, StateGraph

from agent import routers
from agent.materialise import DEFAULT_STATE_DIR, state_dir  # noqa: F401  (part of this module's API)
from agent.nodes.apply_fix import apply_fix
from agent.nodes.diagnose import diagnose
from agent.nodes.ingest import ingest
from agent.nodes.llm_fix import llm_fix
from agent.nodes.parity import parity
from agent.nodes.plan import plan
from agent.nodes.profile import profile
from agent.nodes.reference import reference_run
from agent.nodes.report import report
from agent.nodes.rewrite import rewrite
from agent.nodes.scan import scan
from agent.nodes.target import target_run, tests
from agent.state import MigrationState

logger = logging.getLogger(__name__)

DATABASE_URL_ENV = "FERRY_DATABASE_URL"


def build_graph() -> StateGraph:
    g = StateGraph(MigrationState)
    for name, fn in (
        ("ingest", ingest), ("reference_run", reference_run), ("scan", scan), ("plan", plan),
        ("rewrite", rewrite), ("target_run", target_run), ("diagnose", diagnose), ("llm_fix", llm_fix),
        ("apply_fix", apply_fix), ("parity", parity), ("tests", tests), ("profile", profile), ("report", report),
    ):
        g.add_node(name, fn)
    g.add_edge(START, "ingest")
    g.add_conditional_edges("ingest", routers.after_ingest)
    g.add_conditional_edges("reference_run", routers.after_reference)
    g.add_conditional_edges("scan", routers.after_step, {"next": "plan", "report": "report"})
    g.add_conditional_edges("plan", routers.after_step, {"next": "rewrite", "report": "report"})
    g.add_conditional_edges("rewrite", routers.after_step, {"next": "target_run", "report": "report"})
    g.add_conditional_edges("target_run", routers.after_target)
    g.add_conditional_edges("diagnose", routers.after_diagnose)
    g.add_conditional_edges("llm_fix", routers.after_llm)
    g.add_conditional_edges("apply_fix", routers.after_apply)
    g.add_conditional_edges("parity", routers.after_parity)
    g.add_conditional_edges("tests", routers.after_tests)
    g.add_edge("profile", "report")
    g.add_edge("report", END)
    return g


# Postgres: one advisory-lock key serialises the table setup of processes that start together.
PG_SETUP_LOCK_KEY = 0x46455252  # "FERR"
PG_SETUP_WAIT_S = 60.0
PG_CONNECT_TIMEOUT_S = 10
SQLITE_FILE = "checkpoints.sqlite"


def database_url() -> str | None:
    """The Postgres URL in FERRY_DATABASE_URL, or None (checkpoints go to SQLite)."""
    url = os.environ.get(DATABASE_URL_ENV, "").strip()
    if not url:
        return None
    if not url.startswith(("postgres://", "postgresql://")):
        from agent.errors import ToolUnavailable

        raise ToolUnavailable(
            f"{DATABASE_URL_ENV} must be a postgresql:// URL (postgresql://USER:PASSWORD@HOST:PORT/DBNAME), "
            f"got {redact_url(url)!r}; fix it, or unset {DATABASE_URL_ENV} to keep checkpoints in SQLite "
            "under the state dir")
    return url


def redact_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``, for messages."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not (sep and at and ":" in creds):
        return url
    return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}"


def describe_store(state_directory: Path) -> str:
    """Where the checkpoints are, in words (for messages)."""
    url = database_url()
    return f"the Postgres database {redact_url(url)}" if url else str(state_directory / SQLITE_FILE)


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
    from agent.errors import ToolUnavailable

    try:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row
    except ImportError as exc:
        raise ToolUnavailable(
            f"{DATABASE_URL_ENV} names a Postgres database but langgraph-checkpoint-postgres / psycopg is not "
            f"installed ({exc}); install Ferry's 'postgres' extra (pip install -e '.[postgres]'), or unset "
            f"{DATABASE_URL_ENV} to keep checkpoints in SQLite under the state dir") from exc
    where = redact_url(url)
    try:
        extra = {} if "connect_timeout" in psycopg.conninfo.conninfo_to_dict(url) else {
            "connect_timeout": PG_CONNECT_TIMEOUT_S}
        # The options PostgresSaver relies on: autocommit (each write is durable at once),
        # no server-side prepared statements (safe behind poolers), rows as dicts.
        conn = psycopg.Connection.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row, **extra)
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


def _setup_postgres(saver: Any, conn: Any) -> None:
    """``saver.setup()`` under an advisory lock: PostgresSaver's setup is not safe when two
    processes run it at once (duplicate table types, duplicate migration versions)."""
    from agent.errors import ToolUnavailable

    deadline = time.monotonic() + PG_SETUP_WAIT_S
    # try-lock in a loop rather than a blocking lock: a session blocked inside a statement would
    # hold a snapshot that the holder's CREATE INDEX CONCURRENTLY waits for (a deadlock).
    while not conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (PG_SETUP_LOCK_KEY,)).fetchone()["ok"]:
        if time.monotonic() > deadline:
            raise ToolUnavailable(
                f"another process has been creating Ferry's checkpoint tables for {PG_SETUP_WAIT_S:.0f} s; "
                "check the database for a stuck session (pg_stat_activity) and try again")
        time.sleep(0.05)
    try:
        saver.setup()
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (PG_SETUP_LOCK_KEY,))


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (for messages that quote a driver's error)."""
    return " ".join(str(exc).split())


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


def config_for(migration_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": migration_id}, "recursion_limit": 200}


ProgressFn = Callable[[str, dict[str, Any]], None]


def drive(app: Any, payload: Any, migration_id: str, progress: ProgressFn | None = None) -> dict[str, Any]:
    """Run the compiled graph until it ends or interrupts; return the final state values."""
    cfg = config_for(migration_id)
    for chunk in app.stream(payload, cfg, stream_mode="updates", durability="sync"):
        for node, update in chunk.items():
            if progress is not None and node != "__interrupt__":
                progress(node, update or {})
            elif progress is not None:
                progress("__interrupt__", {"interrupts": [getattr(i, "value", i) for i in update]})
    return snapshot(app, migration_id)


def snapshot(app: Any, migration_id: str) -> dict[str, Any]:
    """The saved state plus ``pending`` (the nodes still to run or finish) and ``interrupts``
    (waiting questions).

    When Ferry or the checkpoint store died after a node's writes were saved but before the next
    checkpoint, LangGraph lists no next node although the graph has not ended (no status yet);
    those nodes are reported as pending: driving the graph again applies their writes and goes on.
    """
    st = app.get_state(config_for(migration_id))
    values = dict(st.values or {})
    values["pending"] = list(st.next or ())
    if not values["pending"] and values.get("migration_id") and values.get("status") is None:
        values["pending"] = [t.name for t in (st.tasks or ())]
    values["interrupts"] = [i.value for t in (st.tasks or ()) for i in (getattr(t, "interrupts", ()) or ())]
    return values
