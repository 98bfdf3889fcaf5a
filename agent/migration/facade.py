"""Start, resume and inspect migrations (the graph with its checkpointer); used by the CLI and service."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from langgraph.types import Command

from agent.errors import ToolUnavailable
from agent.ids import check_id
from agent.migration import early
from agent.migration.checkpoints import checkpointer, describe_store, migration_ids, one_line
from agent.migration.early import new_migration_id
from agent.migration.graph import MigrationContext, ProgressFn, build_graph, drive, snapshot
from agent.migration.locks import MigrationLocked, migration_lock
from agent.migration.runs import RunScheduler
from agent.migration.state import MigrationOptions, dump
from agent.migration.workspace import state_dir

__all__ = ["MigrationLocked", "UnknownMigration", "initial_state", "list_migrations", "load", "resume", "start"]


class UnknownMigration(LookupError):
    """No checkpoint exists for this migration id in this state store."""


def _store_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [sqlite3.Error]
    try:
        import psycopg

        errors.append(psycopg.Error)
    except ImportError:
        pass
    return tuple(errors)


def _drive(app: Any, payload: Any, migration_id: str, sdir: Path, runs: RunScheduler,
           progress: ProgressFn | None) -> dict[str, Any]:
    """``graph.drive``; a checkpoint store that fails mid-migration (Postgres server gone, disk full)
    ends the run with a clear message instead of a driver traceback, every step checkpointed before
    being kept."""
    try:
        return drive(app, payload, migration_id, MigrationContext(runs=runs), progress)
    except _store_errors() as exc:
        raise ToolUnavailable(
            f"the checkpoint store ({describe_store(sdir)}) failed during migration {migration_id}: "
            f"{one_line(exc)[:300]}. The steps checkpointed before are kept: bring the store back "
            f"and run `ferry resume {migration_id}`") from exc


def initial_state(migration_id: str, opts: MigrationOptions) -> dict[str, Any]:
    return {"migration_id": migration_id, "options": dump(opts), "workspace": None,
            "files": {}, "edits": [], "steps": [], "runs": [], "tried": [], "iteration": 0,
            "llm_usage": {}, "elapsed_s": 0.0, "status": None, "summary": None, "proposal": None,
            "reference_pending": False}


def start(opts: MigrationOptions, *, migration_id: str | None = None, progress: ProgressFn | None = None,
          runs: RunScheduler | None = None) -> dict[str, Any]:
    """Run a new migration until it ends or waits for approval; returns the state snapshot.

    ``runs``: the scheduler its background runs go to (the CLI's, which may already run the
    reference; a new one otherwise)."""
    migration_id = check_id(migration_id or new_migration_id())  # a plain name: it names directories
    runs = runs or RunScheduler()
    sdir = state_dir(opts.state_dir)
    with checkpointer(sdir) as saver, migration_lock(sdir, migration_id):
        app = build_graph().compile(checkpointer=saver)
        if app.get_state({"configurable": {"thread_id": migration_id}}).values:
            raise ValueError(f"migration {migration_id} already exists; use `ferry resume {migration_id}`")
        early.start_early(runs, opts, migration_id)  # unless the caller did before building anything
        return _drive(app, initial_state(migration_id, opts), migration_id, sdir, runs, progress)


def resume(migration_id: str, sdir: str | Path | None, *, answer: dict[str, Any] | None = None,
           progress: ProgressFn | None = None, runs: RunScheduler | None = None) -> dict[str, Any]:
    """Continue from the last checkpoint (answering a pending approval when ``answer`` is given).

    Raises :class:`MigrationLocked` at once when another process is driving this migration, and
    :class:`agent.ids.InvalidId` for an id that is not a plain name."""
    check_id(migration_id)
    runs = runs or RunScheduler()
    with checkpointer(state_dir(sdir)) as saver, migration_lock(state_dir(sdir), migration_id):
        app = build_graph().compile(checkpointer=saver)
        current = snapshot(app, migration_id)
        if not current.get("migration_id"):
            raise UnknownMigration(f"no migration {migration_id!r} in {describe_store(state_dir(sdir))}")
        if current["interrupts"]:
            if answer is None:
                return current  # still waiting for a decision
            return _drive(app, Command(resume=answer), migration_id, state_dir(sdir), runs, progress)
        if not current["pending"]:
            return current  # already finished
        return _drive(app, None, migration_id, state_dir(sdir), runs, progress)


def load(migration_id: str, sdir: str | Path | None) -> dict[str, Any]:
    check_id(migration_id)
    with checkpointer(state_dir(sdir)) as saver:
        app = build_graph().compile(checkpointer=saver)
        current = snapshot(app, migration_id)
    if not current.get("migration_id"):
        raise UnknownMigration(f"no migration {migration_id!r} in {describe_store(state_dir(sdir))}")
    return current


def list_migrations(sdir: str | Path | None) -> list[str]:
    """Migration ids that have checkpoints in the store in use (SQLite or Postgres), newest first."""
    return migration_ids(state_dir(sdir))
