"""The workers: a fixed number of threads that take queued sessions from the store and drive their migrations.

The queue is the sessions table: a session is ``queued`` until a worker claims it, and a server that
died leaves its ``running`` sessions to the next one, which queues them again; their migrations resume
from their checkpoints (:func:`agent.migration.facade.resume`), their events are completed from the saved state.

On Postgres (several servers on one database) a claim is a lease: :class:`Workers`' heartbeat renews the
leases of this server's sessions every third of ``lease_s``, queues again the sessions whose host let its
lease run out (any server does; each is requeued once), and stops a session of its own whose lease was
lost or that a DELETE on another server asked to stop. Every write of a claimed session names its claim's
fence, so a server that lost a lease writes nothing more. :meth:`Workers.run_claimed` is the one step that
drives a claimed session (what another executor calls).
"""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path
from typing import Any

from agent.migration.facade import (
    MigrationLocked,
    MigrationOptions,
    MigrationSnapshot,
    NodeUpdate,
    RunScheduler,
    UnknownMigration,
    cancel,
    load,
    options_for,
)
from agent.migration.paths import artifacts_root, session_out, session_repo, workspaces_root
from agent.migration.paths import session_dir as session_path
from agent.service import events, remembered
from agent.service.executor import BEFORE_RESULT, Executor, ExecutorFailure, SessionCancelled, ThreadExecutor
from agent.service.schemas import SessionState
from agent.service.settings import ServiceSettings
from agent.service.shown import session_paths, shown_data
from agent.service.store import LeaseLost, SessionRow, SessionStore

logger = logging.getLogger(__name__)
#: at most this many remembered answers given in a row (each is a new question; a bound all the same)
MAX_REMEMBERED = 50


def session_dir(settings: ServiceSettings, sid: str) -> Path:
    """``<data dir>/sessions/<sid>``; InvalidId for an id that is not a plain name or leads out of it."""
    return session_path(settings.data_dir, sid)


def repo_dir(settings: ServiceSettings, sid: str) -> Path:
    """The session's own copy of the repository (the migration reads only this)."""
    return session_repo(settings.data_dir, sid)


def out_dir(settings: ServiceSettings, row: SessionRow) -> Path:
    return session_out(settings.data_dir, row.id, row.attempt)


def migration_options(settings: ServiceSettings, row: SessionRow) -> MigrationOptions:
    o = row.options
    return options_for(source=str(repo_dir(settings, row.id)), run_command=o.run, test_command=o.test,
                       out_dir=str(out_dir(settings, row)), state_dir=str(settings.data_dir), llm=o.llm,
                       approve=o.approve, apply=False, device=o.device, max_iterations=o.max_iterations,
                       run_timeout_s=o.run_timeout_s, max_wall_s=o.max_wall_s, seed=o.seed, python=o.python,
                       env=o.env, cwd=o.cwd, skip_rules=o.skip_rules)


def remove_files(settings: ServiceSettings, row: SessionRow) -> None:
    """The session's repository copy, outputs, workspaces and run artifacts (its events stay until deleted)."""
    mids = [row.id] + [f"{row.id}-a{n}" for n in range(2, row.attempt + 1)]
    for path in [session_dir(settings, row.id), *(workspaces_root(settings.data_dir, m) for m in mids),
                 *(artifacts_root(settings.data_dir, m) for m in mids)]:
        shutil.rmtree(path, ignore_errors=True)


def executor_for(settings: ServiceSettings) -> Executor:
    """The executor ``settings.executor`` names (Ray's imported only when asked for)."""
    if settings.executor == "ray":
        from agent.service.ray_executor import RayExecutor

        return RayExecutor(settings)
    return ThreadExecutor(settings)


class Workers:
    def __init__(self, settings: ServiceSettings, store: SessionStore, executor: Executor | None = None) -> None:
        self.settings = settings
        self.store = store
        self.executor = executor or executor_for(settings)  # where a claimed session's migration runs
        self.runs: RunScheduler = self.executor.runs
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._cancel: dict[str, threading.Event] = {}
        self._held: dict[str, int] = {}  # session id -> the fence of this server's claim
        self._lost: dict[str, threading.Event] = {}  # set when the session's lease is lost
        self._lock = threading.Lock()
        self.busy = 0

    def start(self) -> None:
        self.executor.open()
        again, stopped = self.store.interrupted()
        for row in stopped:  # DELETE had asked them to stop before the previous server died
            self._cancelled(row)
        if again:
            logger.info("resuming %d session(s) a previous server left running: %s", len(again), ", ".join(again))
        for n in range(self.settings.workers):
            t = threading.Thread(target=self._loop, name=f"ferry-worker-{n}", daemon=True)
            t.start()
            self._threads.append(t)
        if self.store.leases:
            t = threading.Thread(target=self._heartbeat, name="ferry-leases", daemon=True)
            t.start()
            self._threads.append(t)

    def _heartbeat(self) -> None:
        """Renew this server's leases, stop the sessions whose lease is lost or that a DELETE elsewhere
        asked to stop, and queue again those whose host let its lease run out."""
        every = self.settings.lease_s / 3
        while not self._stop.wait(every):
            try:
                with self._lock:
                    held = dict(self._held)
                lost, stop = self.store.renew(held)
                for sid in lost:
                    logger.warning("session %s: this server's lease on it is lost; stopping it here", sid)
                    with self._lock:
                        ev, mark = self._cancel.get(sid), self._lost.get(sid)
                    if mark is not None:
                        mark.set()
                    if ev is not None:
                        cancel(sid, self.runs, ev)
                for sid in stop - lost:
                    self.cancel(sid)
                _, stopped = self.store.interrupted()  # requeues those whose host let its lease run out
                for row in stopped:  # a DELETE asked them to stop, and their host is gone
                    self._cancelled(row)
            except Exception as exc:  # the database is away: the leases are renewed at the next beat
                logger.warning("the lease heartbeat failed: %s: %s", type(exc).__name__, exc)

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop taking sessions; running ones stay ``running`` in the store and resume at the next start.

        Their runs are not cancelled: a cancelled run a node joined would be checkpointed as the run's
        result; the sandboxes end with this process (bubblewrap's --die-with-parent), the node's
        unfinished step is redone on resume."""
        self._stop.set()
        self.store.notify()
        for t in self._threads:
            t.join(timeout=grace_s)
        self.executor.close()

    def cancel(self, sid: str) -> bool:
        """Ask a running session to stop; True when a worker has it."""
        with self._lock:
            ev = self._cancel.get(sid)
        if ev is None:
            return False
        cancel(sid, self.runs, ev)  # its attempts' ids start with the session's: <sid>, <sid>-a2...
        return True

    def _loop(self) -> None:
        while not self._stop.is_set():
            row = self.store.claim()
            if row is None:
                with self.store.changed:
                    self.store.changed.wait(timeout=1.0)
                continue
            self.run_claimed(row)

    def run_claimed(self, row: SessionRow) -> None:
        """Drive one claimed session (``store.claim()``'s row) to its end, a question, or a failure, with its
        events recorded; never raises."""
        with self._lock:
            self._cancel[row.id] = threading.Event()
            self._lost[row.id] = threading.Event()
            self._held[row.id] = row.fence
            self.busy += 1
        try:
            self._run(row)
        except LeaseLost as exc:  # another server has it now: nothing more is written here
            logger.warning("%s", exc)
        except MigrationLocked as exc:  # a server that lost its lease still drives it: try again later
            logger.warning("session %s: %s; queued again", row.id, exc)
            self._stop.wait(min(5.0, self.settings.lease_s / 3))
            self.store.requeue(row.id, expect=("running",), fence=row.fence)
        except Exception as exc:  # never lose a worker thread: the session says what happened
            logger.exception("session %s: the worker failed", row.id)
            if not self._stop.is_set() and not self._lost[row.id].is_set():
                try:
                    self._fail(row, f"the service failed while running it: {type(exc).__name__}: {exc}")
                except LeaseLost as lost:
                    logger.warning("%s", lost)
        finally:
            with self._lock:
                self._cancel.pop(row.id, None)
                self._lost.pop(row.id, None)
                self._held.pop(row.id, None)
                self.busy -= 1

    def _run(self, row: SessionRow) -> None:
        sid, mid, store, fence = row.id, row.migration_id, self.store, row.fence
        cancel, lost = self._cancel[sid], self._lost[sid]
        current = store.get(sid)
        if current is None or current.cancel:
            self._cancelled(row)
            return
        sdir = self.settings.data_dir
        try:
            begun: MigrationSnapshot | None = load(mid, sdir)
        except UnknownMigration:
            begun = None
        shown = session_paths(self.settings, sid, row.attempt)

        def record(evs: list[events.Event]) -> None:  # a remote user reads them: no server path in them
            store.add_events(sid, [(kind, key, shown_data(data, shown)) for kind, key, data in evs], fence=fence)

        store.add_event(sid, "started", {"attempt": row.attempt, "resumed": begun is not None,
                                         **({"host": self.settings.host_id} if store.leases else {})}, fence=fence)
        if begun is not None:  # what a killed server did not record yet
            record(events.from_state(row.attempt, begun))
        progress = events.SessionProgress(row.attempt, begun)

        def on_progress(node: str, update: NodeUpdate) -> None:
            if lost.is_set():
                raise LeaseLost(sid, fence)
            if node == BEFORE_RESULT:  # the heartbeat may not have beaten since the lease ran out: ask now
                if store.leases and sid in store.renew({sid: fence})[0]:
                    lost.set()
                    raise LeaseLost(sid, fence)
                return
            record(progress.events(node, update))
            if node != "__interrupt__":
                store.update(sid, step=node, fence=fence)
            if cancel.is_set() and not self._stop.is_set():
                raise SessionCancelled(sid)

        try:
            if begun is None:
                state = self.executor.start(row, migration_options(self.settings, row), on_progress, cancel)
            else:
                state = self.executor.resume(row, row.answer, on_progress, cancel)
            memory = remembered.answers(store, sid) if state.waiting else {}
            for _ in range(MAX_REMEMBERED):  # the same question answered before: that answer again
                if not state.interrupts:
                    break
                asked = shown_data(state.interrupts[0].data(), shown)
                key = remembered.question_key(asked)
                action = memory.get(key)
                if action is None:
                    break
                answer: dict[str, Any] = {"action": action}
                if action == "edit":  # the reviewer's own files, as kept when they answered
                    files = remembered.edited_files(session_dir(self.settings, sid), key)
                    if files is None:
                        break
                    answer["files"] = files
                store.add_event(sid, "approval_answer", {"action": action, "files": sorted(answer.get("files") or []),
                                                         "remembered": True, "rule": asked.get("rule"),
                                                         "site": asked.get("site")}, fence=fence)
                state = self.executor.resume(row, answer, on_progress, cancel)
        except SessionCancelled:
            if lost.is_set():  # the heartbeat stopped it for a lost lease, not a DELETE: another host has it
                raise LeaseLost(sid, fence) from None
            self._cancelled(row)
            return
        except LeaseLost:
            raise
        except Exception as exc:
            if isinstance(exc, MigrationLocked) and store.leases:
                raise  # run_claimed queues it again
            if lost.is_set():
                raise LeaseLost(sid, fence) from exc
            if self._stop.is_set():
                return  # the server is stopping: the session resumes at its next start
            named = isinstance(exc, ExecutorFailure)  # the executor's own words, and the status it names
            detail = str(exc) if named else f"{type(exc).__name__}: {exc}"
            logger.warning("session %s failed: %s", sid, detail)
            self._fail(row, detail, status=exc.status if isinstance(exc, ExecutorFailure) else None)
            return
        record(events.from_state(row.attempt, state))
        if state.waiting:
            self._finish(row, "waiting_for_approval", step=progress.node)
        elif state.pending:
            if self._stop.is_set():
                return
            self._fail(row, f"the migration stopped before its end (pending: {', '.join(state.pending)})")
        else:
            self._finish(row, "finished", status=state.status, summary=state.summary, step=progress.node)

    def _finish(self, row: SessionRow, state: SessionState, **fields: Any) -> None:
        shown = session_paths(self.settings, row.id, row.attempt)
        fields = {k: shown(v) if k in ("summary", "error") and isinstance(v, str) else v for k, v in fields.items()}
        current = self.store.get(row.id)
        if current is None:
            return  # deleted meanwhile
        if current.cancel:  # DELETE came between the claim and this worker's stop signal
            self._cancelled(row)
            return
        view = {"state": state, "status": fields.get("status"), "summary": fields.get("summary"),
                "error": fields.get("error")}
        self.store.finish(row.id, ("state", view, f"a{row.attempt}:end:{state}:{row.updated_at}"), state=state,
                          answer=None, fence=row.fence if self.store.leases else None, **fields)

    def _fail(self, row: SessionRow, detail: str, status: str | None = None) -> None:
        detail = session_paths(self.settings, row.id, row.attempt)(detail)
        self.store.add_event(row.id, "error", {"detail": detail}, fence=row.fence if self.store.leases else None)
        self._finish(row, "failed", error=detail, **({"status": status} if status else {}))

    def _cancelled(self, row: SessionRow) -> None:
        cancelled(self.settings, self.store, row)


def cancelled(settings: ServiceSettings, store: SessionStore, row: SessionRow) -> None:
    """The session's files removed, its state ``cancelled`` with its event (once)."""
    remove_files(settings, row)
    current = store.get(row.id)
    if current is not None and current.state != "cancelled":
        store.finish(row.id, ("cancelled", {}, "cancelled"), state="cancelled")
