"""The one door to migrations: ``start / resume / load / cancel``, each answering a typed
:class:`~agent.migration.snapshot.MigrationSnapshot`; used by the CLI, the service, the PR bot and the
eval harness.

This module stays light (no LangGraph at import): ``ferry migrate`` imports it, and :func:`start`
starts a new migration's reference run and warm interpreter (``agent.migration.early``) before the
graph is built, so that they go on while LangGraph is imported and the graph compiled.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from agent.errors import ToolUnavailable
from agent.ids import check_id
from agent.migration import adapters, early, handover
from agent.migration.checkpoints import (
    DATABASE_URL_ENV,
    checkpointer,
    describe_store,
    migration_ids,
    one_line,
    pg_conninfo,
)
from agent.migration.driver import config_for, drive, snapshot
from agent.migration.early import new_migration_id
from agent.migration.handover import HandoverRefused, Rewrite
from agent.migration.locks import MigrationLocked, migration_lock
from agent.migration.options import MigrationOptions, options_for
from agent.migration.paths import DEFAULT_STATE_DIR, state_dir
from agent.migration.records import Plan
from agent.migration.runs import RunScheduler
from agent.migration.snapshot import INTERRUPT, ApprovalRequest, MigrationSnapshot, NodeUpdate, ProgressFn, StateView
from agent.migration.state import dump

__all__ = ["DATABASE_URL_ENV", "DEFAULT_STATE_DIR", "INTERRUPT", "ApprovalRequest", "HandoverRefused",
           "MigrationLocked", "MigrationOptions", "MigrationSnapshot", "NodeUpdate", "ProgressFn", "RunScheduler",
           "StateView", "UnknownMigration", "cancel", "check_store", "export_checkpoint", "import_checkpoint",
           "initial_state", "list_migrations", "load", "new_migration_id", "one_line", "options_for", "pg_conninfo",
           "resume", "start", "state_dir"]


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


def _compiled(saver: Any) -> Any:
    from agent.migration.graph import build_graph

    return build_graph().compile(checkpointer=saver)


def _drive(app: Any, payload: Any, migration_id: str, sdir: Path, runs: RunScheduler,
           progress: ProgressFn | None) -> MigrationSnapshot:
    """``driver.drive``; a checkpoint store that fails mid-migration (Postgres server gone, disk full)
    ends the run with a clear message instead of a driver traceback, every step checkpointed before
    being kept."""
    from agent.migration.graph import MigrationContext

    try:
        return drive(app, payload, migration_id, MigrationContext(runs=runs), progress)
    except _store_errors() as exc:
        raise ToolUnavailable(
            f"the checkpoint store ({describe_store(sdir)}) failed during migration {migration_id}: "
            f"{one_line(exc)[:300]}. The steps checkpointed before are kept: bring the store back "
            f"and run `ferry resume {migration_id}`") from exc


@contextmanager
def _stoppable(stop: threading.Event | None) -> Iterator[None]:
    """The migration's runs stop when ``stop`` is set (:func:`cancel`)."""
    with adapters.stop_signal(stop) if stop is not None else nullcontext():
        yield


def initial_state(migration_id: str, opts: MigrationOptions) -> dict[str, Any]:
    return {"migration_id": migration_id, "options": dump(opts), "workspace": None,
            "files": {}, "edits": [], "steps": [], "runs": [], "tried": [], "iteration": 0,
            "llm_usage": {}, "elapsed_s": 0.0, "status": None, "summary": None, "proposal": None,
            "reference_pending": False}


def _has_state(saver: Any, migration_id: str) -> bool:
    saved = saver.get_tuple(config_for(migration_id))
    return saved is not None and bool(saved.checkpoint.get("channel_values"))


def start(opts: MigrationOptions, *, migration_id: str | None = None, progress: ProgressFn | None = None,
          runs: RunScheduler | None = None, stop: threading.Event | None = None) -> MigrationSnapshot:
    """Run a new migration until it ends or waits for approval; returns its snapshot.

    Its reference run and warm interpreter start here, before the graph is built (the id checked to
    have no state first). ``runs``: the scheduler its background runs go to (a new one by default);
    ``stop``: the event :func:`cancel` sets. ValueError when the id has state already."""
    migration_id = check_id(migration_id or new_migration_id())  # a plain name: it names directories
    runs = runs or RunScheduler()
    sdir = state_dir(opts.state_dir)
    with checkpointer(sdir) as saver, migration_lock(sdir, migration_id), _stoppable(stop):
        if _has_state(saver, migration_id):
            raise ValueError(f"migration {migration_id} already exists; use `ferry resume {migration_id}`")
        early.start_early(runs, opts, migration_id)  # the one place: goes on while the graph is built
        app = _compiled(saver)
        return _drive(app, initial_state(migration_id, opts), migration_id, sdir, runs, progress)


def resume(migration_id: str, sdir: str | Path | None, *, answer: dict[str, Any] | None = None,
           progress: ProgressFn | None = None, runs: RunScheduler | None = None,
           stop: threading.Event | None = None) -> MigrationSnapshot:
    """Continue from the last checkpoint (answering a pending approval when ``answer`` is given).

    Raises :class:`MigrationLocked` at once when another process is driving this migration, and
    :class:`agent.ids.InvalidId` for an id that is not a plain name."""
    from langgraph.types import Command

    check_id(migration_id)
    runs = runs or RunScheduler()
    with checkpointer(state_dir(sdir)) as saver, migration_lock(state_dir(sdir), migration_id), _stoppable(stop):
        app = _compiled(saver)
        current = snapshot(app, migration_id)
        if not current.migration_id:
            raise UnknownMigration(f"no migration {migration_id!r} in {describe_store(state_dir(sdir))}")
        if current.interrupts:
            if answer is None:
                return current  # still waiting for a decision
            return _drive(app, Command(resume=answer), migration_id, state_dir(sdir), runs, progress)
        if not current.pending:
            return current  # already finished
        return _drive(app, None, migration_id, state_dir(sdir), runs, progress)


def load(migration_id: str, sdir: str | Path | None) -> MigrationSnapshot:
    """The migration's saved state (UnknownMigration when it has none)."""
    check_id(migration_id)
    with checkpointer(state_dir(sdir)) as saver:
        current = snapshot(_compiled(saver), migration_id)
    if not current.migration_id:
        raise UnknownMigration(f"no migration {migration_id!r} in {describe_store(state_dir(sdir))}")
    return current


def cancel(migration_id: str, runs: RunScheduler, stop: threading.Event | None = None) -> list[str]:
    """Stop a migration this process drives: ``stop`` (the event it was started or resumed with) set,
    so that its run in flight ends and its driver stops at the next step where its progress callback
    checks it; its background runs cancelled (every key starting with ``migration_id``: ``""`` cancels
    all of ``runs``). Its checkpoints stay. Returns the runs cancelled."""
    if stop is not None:
        stop.set()
    return runs.cancel_prefix(migration_id)


def export_checkpoint(migration_id: str, sdir: str | Path | None, rewrite: Rewrite = str) -> str | None:
    """The migration's latest checkpoint as text, to be saved in another store (:func:`import_checkpoint`);
    ``rewrite`` applied to every string of its state (this machine's paths made the other's). None when
    it has none."""
    check_id(migration_id)
    with checkpointer(state_dir(sdir)) as saver:
        return handover.export_latest(saver, migration_id, rewrite)


def import_checkpoint(migration_id: str, sdir: str | Path | None, text: str, rewrite: Rewrite = str,
                      check: Callable[[MigrationSnapshot], None] | None = None) -> None:
    """Save a checkpoint another store exported as the migration's latest here. HandoverRefused (a
    ValueError) when the text is not one checkpoint of this migration, or when ``check`` refuses the
    state it holds (nothing is saved then)."""
    check_id(migration_id)
    parsed = handover.parse(text, migration_id, rewrite)
    if check is not None:
        check(MigrationSnapshot(values=parsed[0]["channel_values"]))
    with checkpointer(state_dir(sdir)) as saver, migration_lock(state_dir(sdir), migration_id):
        handover.import_latest(saver, migration_id, parsed)


def list_migrations(sdir: str | Path | None) -> list[str]:
    """Migration ids that have checkpoints in the store in use (SQLite or Postgres), newest first."""
    return migration_ids(state_dir(sdir))


def check_store(sdir: str | Path | None) -> str:
    """Open the checkpoint store once (a bad ``FERRY_DATABASE_URL`` or state dir raises here, not in the
    middle of a migration); returns where the checkpoints are, credentials hidden."""
    with checkpointer(state_dir(sdir)):
        pass
    return describe_store(state_dir(sdir))


def plan_of(source: Path, *, run_command: str | None, test_command: str | None, device: str,
            max_iterations: int) -> tuple[Plan, str]:
    """What a migration of ``source`` would do, without starting one: the scan and the offline plan the
    graph's scan and plan nodes make (the files the codemods rewrite, the findings left for review, the
    checks), and its one-line summary."""
    from agent.migration.nodes.plan import offline_plan, plan_summary
    from agent.migration.nodes.scan import digest_of

    the_plan = offline_plan(digest_of(adapters.scan(source)), source, run_command=run_command,
                            test_command=test_command, device=device, max_iterations=max_iterations)
    return the_plan, plan_summary(the_plan)
