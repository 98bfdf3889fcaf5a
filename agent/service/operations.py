"""What a caller can do to sessions, whichever door it came through (the HTTP routes, ``ferry mcp``).

Each operation raises a :class:`Refused` subclass that says what was wrong and what to do; the door maps
it to its own form (an HTTP status, an MCP tool error). Nothing here knows about HTTP.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from agent.llm.config import configured as llm_configured
from agent.migration.facade import UnknownMigration, load, new_migration_id
from agent.service import remembered
from agent.service.approvals import files_from_diff
from agent.service.schemas import Approval, SessionOptions, SessionSource
from agent.service.settings import ServiceSettings
from agent.service.shown import session_paths, shown_data
from agent.service.store import QueueFull, SessionRow, SessionStore
from agent.service.uploads import SourceRefused, extract_archive, resolve_allowed, snapshot_tree
from agent.service.workers import Workers, cancelled, repo_dir, session_dir
from tools.runner.interpreter import InterpreterError, ferrys_interpreter, inspect_interpreter

logger = logging.getLogger(__name__)


class Refused(ValueError):
    """The request cannot be done as asked; the message says why and what to do."""


class OptionRefused(Refused):
    """One of the session's options is not acceptable on this server."""

    def __init__(self, field: str, message: str, value: Any = None) -> None:
        super().__init__(message)
        self.field, self.value = field, value


class BadSource(Refused):
    """The archive or the path is refused (see the message)."""


class TooBusy(Refused):
    """The queue is full."""

    def __init__(self, waiting: int) -> None:
        super().__init__(f"{waiting} sessions are waiting for a worker (the queue is full); try again later")
        self.waiting = waiting


class NotWaiting(Refused):
    """An approval answer for a session that is not waiting for one."""


class BadAnswer(Refused):
    """An edit answer whose diff does not apply."""


def check_options(opts: SessionOptions, settings: ServiceSettings) -> SessionOptions:
    """What only the server can judge: its model, its interpreters (may start one to look at it)."""
    if opts.llm and not llm_configured():
        raise OptionRefused("llm", "this server has no model configured (FERRY_LLM_BASE_URL, FERRY_LLM_MODEL and "
                            "a key); leave llm out or false to use the offline policy", True)
    if opts.python is not None:
        allowed = {str(Path(p).absolute()) for p in (*settings.pythons, ferrys_interpreter())}
        if str(Path(opts.python).absolute()) not in allowed:
            named = ", ".join(sorted(settings.pythons)) or "none besides its own"
            raise OptionRefused("python", f"this server runs code only with the interpreters its operator "
                                f"allowed ({named}); leave python out", opts.python)
        try:
            interp = inspect_interpreter(opts.python)
        except InterpreterError as exc:
            raise OptionRefused("python", str(exc), opts.python) from exc
        if interp.is_ferrys:
            opts = opts.model_copy(update={"python": None})
    return opts


def populate(settings: ServiceSettings, sid: str, path: str | None, archive: Path | None,
             archive_name: str) -> SessionSource:
    """The session's own copy of the repository; nothing is left behind when it is refused."""
    dest = repo_dir(settings, sid)
    dest.mkdir(parents=True, mode=0o700)
    try:
        if path is not None:
            src = resolve_allowed(path, settings.allow_roots)
            files = snapshot_tree(src, dest, settings.uploads)
            return SessionSource(kind="path", name=str(src), files=files)
        assert archive is not None
        files = extract_archive(archive, dest, settings.uploads)
        return SessionSource(kind="archive", name=archive_name, files=files)
    except SourceRefused as exc:
        shutil.rmtree(session_dir(settings, sid), ignore_errors=True)
        raise BadSource(str(exc)) from None
    except BaseException:
        shutil.rmtree(session_dir(settings, sid), ignore_errors=True)
        raise


def new_session_id() -> str:
    return "s" + new_migration_id()[1:]


def register(settings: ServiceSettings, store: SessionStore, sid: str, owner: str, opts: SessionOptions,
             source: SessionSource) -> None:
    """Queue the populated session (its files removed when the queue is full)."""
    try:
        store.create(sid, owner, opts, source, settings.queue)
    except QueueFull as exc:
        shutil.rmtree(session_dir(settings, sid), ignore_errors=True)
        raise TooBusy(exc.waiting) from None
    logger.info("session %s created by %s from %s %s (%d files)", sid, owner, source.kind, source.name, source.files)


def create_from_path(settings: ServiceSettings, store: SessionStore, owner: str, opts: SessionOptions,
                     path: str) -> str:
    """A session over a copy of ``path`` (a directory under one of the allowed roots); its id."""
    if store.waiting() >= settings.queue:
        raise TooBusy(store.waiting())
    opts = check_options(opts, settings)
    sid = new_session_id()
    source = populate(settings, sid, path, None, "")
    register(settings, store, sid, owner, opts, source)
    return sid


def cancel(settings: ServiceSettings, store: SessionStore, workers: Workers, row: SessionRow) -> SessionRow:
    """Cancel the session (a running migration stops at its next step) and remove its workspace."""
    store.update(row.id, cancel=1)
    if not workers.cancel(row.id):  # a worker that has it removes the files when its migration stops
        current = store.get(row.id)
        # another server runs it (Postgres): its heartbeat sees the request and its worker stops it
        if not (store.leases and current is not None and current.state == "running"):
            cancelled(settings, store, row)
    got = store.get(row.id)
    assert got is not None
    return got


def _keep_edit(settings: ServiceSettings, row: SessionRow, files: dict[str, str]) -> None:
    """The edit answer's files, kept so that a later attempt asking the same question gets them again."""
    try:
        snapshot = load(row.migration_id, settings.data_dir)
    except UnknownMigration:
        return
    if not snapshot.interrupts:
        return
    asked = shown_data(snapshot.interrupts[0].data(), session_paths(settings, row.id, row.attempt))
    try:
        remembered.keep_edit(session_dir(settings, row.id), remembered.question_key(asked), files)
    except (OSError, ValueError) as exc:  # not kept: a later attempt asks again
        logger.warning("session %s: the edit answer was not kept: %s", row.id, exc)


def answer(settings: ServiceSettings, store: SessionStore, row: SessionRow, body: Approval) -> SessionRow:
    """Approve or reject the proposed edit, or give one's own version of it (files, or a unified diff)."""
    if row.state != "waiting_for_approval":
        raise NotWaiting(f"session {row.id} is {row.state}, not waiting for approval")
    reply: dict[str, Any] = {"action": body.action}
    if body.amount_usd is not None:  # an approve_cost question's answer
        reply["amount_usd"] = body.amount_usd
    if body.action == "edit":
        files = body.files
        if body.diff is not None:
            try:
                files = files_from_diff(load(row.migration_id, settings.data_dir), body.diff)
            except ValueError as exc:
                raise BadAnswer(str(exc)) from None
        reply["files"] = files
    files_named = sorted(reply.get("files") or [])
    answered: tuple[str, dict[str, Any]] = ("approval_answer", {"action": body.action, "files": files_named})
    if not store.requeue(row.id, expect=("waiting_for_approval",), answer=reply, event=answered):
        raise NotWaiting(f"session {row.id} is no longer waiting for approval (another answer came first, or it "
                         "was cancelled)")
    if body.action == "edit" and reply.get("files"):
        _keep_edit(settings, row, reply["files"])
    got = store.get(row.id)
    assert got is not None
    return got
