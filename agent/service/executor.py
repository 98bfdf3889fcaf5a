"""Where a claimed session's migration runs: in the worker thread that claimed it (the default), or as a
Ray task on a cluster (``ferry serve --executor ray``, :mod:`agent.service.ray_executor`).

The workers (:mod:`agent.service.workers`) own the queue, the events and the session's end; an executor
only runs one step of an attempt, a start or a resume, calling ``progress`` after each node, and answers
its snapshot. Whichever runs it, the migration's checkpoint is in the service's store when the call
returns (``facade.load`` reads it: the outputs routes, the next resume).
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from agent.migration.facade import MigrationOptions, MigrationSnapshot, ProgressFn, RunScheduler, resume, start
from agent.service.settings import ServiceSettings
from agent.service.store import SessionRow

#: the node name an executor that writes a result into the service's stores from elsewhere (a Ray task's)
#: calls ``progress`` with just before: the workers check there, on the database, that this server still
#: holds the session's lease (LeaseLost when not, and nothing is written)
BEFORE_RESULT = "__before_result__"


class SessionCancelled(Exception):
    """DELETE asked for this session while its migration ran: it stops at the next step."""


class ExecutorFailure(RuntimeError):
    """The migration did not come to its result where the executor ran it. The message is the session's
    error as it stands; ``status``, when not None, the session's status that names why."""

    status: str | None = None


class Executor(Protocol):
    runs: RunScheduler

    def open(self) -> None:
        """Ready to run (a cluster connected); raises with what to fix when it cannot be."""

    def close(self) -> None: ...

    def start(self, row: SessionRow, opts: MigrationOptions, progress: ProgressFn,
              stop: threading.Event) -> MigrationSnapshot: ...

    def resume(self, row: SessionRow, answer: dict[str, Any] | None, progress: ProgressFn,
               stop: threading.Event) -> MigrationSnapshot: ...


class ThreadExecutor:
    """The migration runs in the calling worker thread, over the service's data dir."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.runs = RunScheduler()  # the background runs of every session here

    def open(self) -> None:
        return None

    def close(self) -> None:
        return None

    def start(self, row: SessionRow, opts: MigrationOptions, progress: ProgressFn,
              stop: threading.Event) -> MigrationSnapshot:
        return start(opts, migration_id=row.migration_id, progress=progress, runs=self.runs, stop=stop)

    def resume(self, row: SessionRow, answer: dict[str, Any] | None, progress: ProgressFn,
               stop: threading.Event) -> MigrationSnapshot:
        return resume(row.migration_id, self.settings.data_dir, answer=answer, progress=progress, runs=self.runs,
                      stop=stop)

