"""The migration graph (LangGraph StateGraph) and its checkpointer.

ingest -> reference_run -> scan -> plan -> rewrite -> target_run -> (diagnose -> [llm_fix] ->
apply_fix -> target_run)* -> parity [-> apply_fix -> target_run ...] -> tests [-> diagnose ...]
-> profile -> report.

Checkpoints go to SQLite (``<state dir>/checkpoints.sqlite``) by default, or to Postgres when
``FERRY_DATABASE_URL`` names one; every super-step is written synchronously, so a migration
killed at any point resumes from its last finished node.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from pathlib import Path
from typing import Any, Callable, Iterator

from langgraph.graph import END, START, StateGraph

from agent import routers
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
DEFAULT_STATE_DIR = Path("~/.ferry")


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


def state_dir(path: str | Path | None) -> Path:
    d = Path(path).expanduser() if path else DEFAULT_STATE_DIR.expanduser()
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextlib.contextmanager
def checkpointer(state_directory: Path) -> Iterator[Any]:
    """SQLite saver under the state dir, or Postgres when FERRY_DATABASE_URL is set."""
    url = os.environ.get(DATABASE_URL_ENV, "").strip()
    if url.startswith(("postgres://", "postgresql://")):
        try:
            from langgraph.checkpoint.postgres import PostgresSaver
        except ImportError as exc:
            from agent.errors import ToolUnavailable

            raise ToolUnavailable(
                f"{DATABASE_URL_ENV} names a Postgres database but langgraph-checkpoint-postgres is not "
                "installed; install Ferry's 'postgres' extra (pip install -e '.[postgres]')"
            ) from exc
        with PostgresSaver.from_conn_string(url) as saver:
            saver.setup()
            yield saver
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(state_directory / "checkpoints.sqlite"), check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        yield saver
    finally:
        conn.close()


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
    """The saved state plus ``pending`` (the next nodes) and ``interrupts`` (waiting questions)."""
    st = app.get_state(config_for(migration_id))
    values = dict(st.values or {})
    values["pending"] = list(st.next or ())
    values["interrupts"] = [i.value for t in (st.tasks or ()) for i in (getattr(t, "interrupts", ()) or ())]
    return values
