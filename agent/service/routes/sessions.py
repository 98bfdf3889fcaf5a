"""Sessions: create (an upload or an allowed server path), list, read, cancel, answer an approval."""

from __future__ import annotations

import logging
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.concurrency import run_in_threadpool

from agent.llm.config import configured as llm_configured
from agent.migration.facade import UnknownMigration, load, new_migration_id
from agent.service import remembered
from agent.service.approvals import files_from_diff
from agent.service.bodies import read_create
from agent.service.deps import OwnerDep, SessionDep, SettingsDep, StoreDep, WorkersDep
from agent.service.leftovers import UPLOAD_PREFIX
from agent.service.schemas import (
    Approval,
    ErrorDetail,
    SessionCreated,
    SessionList,
    SessionOptions,
    SessionSource,
    SessionState,
    SessionView,
)
from agent.service.settings import ServiceSettings
from agent.service.shown import session_paths, shown_data
from agent.service.store import QueueFull, SessionRow, SessionStore
from agent.service.uploads import SourceRefused, extract_archive, resolve_allowed, snapshot_tree
from agent.service.workers import cancelled, repo_dir, session_dir
from tools.runner.interpreter import InterpreterError, ferrys_interpreter, inspect_interpreter

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/sessions", tags=["sessions"],
                   responses={401: {"model": ErrorDetail, "description": "missing or wrong bearer token"}})
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorDetail, "description": "no such session of yours"}}
RETRY_AFTER_S = 30


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def view(row: SessionRow, store: SessionStore, settings: ServiceSettings, *, interrupts: bool = True) -> SessionView:
    questions: list[dict[str, Any]] = []
    if interrupts and row.state == "waiting_for_approval":
        try:
            questions = shown_data([q.data() for q in load(row.migration_id, settings.data_dir).interrupts],
                                   session_paths(settings, row.id, row.attempt))
        except UnknownMigration:
            questions = []
    return SessionView(id=row.id, owner=row.owner, state=row.state, status=row.status, step=row.step,
                       summary=row.summary, attempt=row.attempt, counts=store.counts(row.id),
                       created_at=_iso(row.created_at), updated_at=_iso(row.updated_at), options=row.options,
                       source=row.source, interrupts=questions, error=row.error)


def _unprocessable(field: str, msg: str, value: Any = None) -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                         [{"type": "value_error", "loc": ["body", "options", field], "msg": msg,
                           "input": value}])


def _check_options(opts: SessionOptions, settings: ServiceSettings) -> SessionOptions:
    """What only the server can judge: its model, its interpreters."""
    if opts.llm and not llm_configured():
        raise _unprocessable("llm", "this server has no model configured (FERRY_LLM_BASE_URL, FERRY_LLM_MODEL and "
                             "a key); leave llm out or false to use the offline policy", True)
    if opts.python is not None:
        allowed = {str(Path(p).absolute()) for p in (*settings.pythons, ferrys_interpreter())}
        if str(Path(opts.python).absolute()) not in allowed:
            named = ", ".join(sorted(settings.pythons)) or "none besides its own"
            raise _unprocessable("python", f"this server runs code only with the interpreters its operator "
                                 f"allowed ({named}); leave python out", opts.python)
        try:
            interp = inspect_interpreter(opts.python)
        except InterpreterError as exc:
            raise _unprocessable("python", str(exc), opts.python) from exc
        if interp.is_ferrys:
            opts = opts.model_copy(update={"python": None})
    return opts


def _too_busy(waiting: int) -> HTTPException:
    return HTTPException(status.HTTP_429_TOO_MANY_REQUESTS,
                         f"{waiting} sessions are waiting for a worker (the queue is full); try again later",
                         headers={"Retry-After": str(RETRY_AFTER_S)})


def _populate(settings: ServiceSettings, sid: str, path: str | None, archive: Path | None,
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
    except BaseException:
        shutil.rmtree(session_dir(settings, sid), ignore_errors=True)
        raise


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=SessionCreated, responses={
    400: {"model": ErrorDetail, "description": "the archive or path is refused (the detail says why)"},
    413: {"model": ErrorDetail, "description": "the upload is larger than this server accepts"},
    429: {"model": ErrorDetail, "description": "the queue is full (see Retry-After)"}},
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/SessionCreate"}},
        "multipart/form-data": {"schema": {"type": "object", "required": ["archive", "options"], "properties": {
            "archive": {"type": "string", "format": "binary", "description": "the repository as tar.gz or zip"},
            "options": {"type": "string", "description": "SessionOptions as JSON"}}}}}}})
async def create(request: Request, owner: OwnerDep, settings: SettingsDep, store: StoreDep) -> SessionCreated:
    """Start a session from an uploaded archive (multipart: `archive`, `options`) or from a directory under one
    of the server's --allow-root roots (JSON: `path`, `options`). Outputs stay in the server's data dir."""
    if store.waiting() >= settings.queue:  # before reading an upload nobody will run
        raise _too_busy(store.waiting())
    with tempfile.TemporaryDirectory(prefix=UPLOAD_PREFIX, dir=settings.data_dir) as tmp:
        body = await read_create(request, settings, Path(tmp))
        opts = await run_in_threadpool(_check_options, body.options, settings)  # may start an interpreter
        sid = "s" + new_migration_id()[1:]
        try:
            source = await run_in_threadpool(_populate, settings, sid, body.path, body.archive,
                                            body.archive_name)
        except SourceRefused as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
    try:  # off the event loop: the commit waits for the disk (synchronous=FULL)
        await run_in_threadpool(store.create, sid, owner, opts, source, settings.queue)
    except QueueFull as exc:
        shutil.rmtree(session_dir(settings, sid), ignore_errors=True)
        raise _too_busy(exc.waiting) from None
    logger.info("session %s created by %s from %s %s (%d files)", sid, owner, source.kind, source.name, source.files)
    return SessionCreated(id=sid, status_url=f"/v1/sessions/{sid}", events_url=f"/v1/sessions/{sid}/events")


@router.get("", response_model=SessionList)
def list_sessions(owner: OwnerDep, settings: SettingsDep, store: StoreDep,
                  state: Annotated[SessionState | None, Query(alias="status")] = None,
                  limit: Annotated[int, Query(ge=1, le=200)] = 50,
                  offset: Annotated[int, Query(ge=0, le=10**9)] = 0) -> SessionList:
    """Your sessions, newest first."""
    rows, total = store.sessions(owner, state, limit, offset)
    return SessionList(items=[view(r, store, settings, interrupts=False) for r in rows], total=total,
                       limit=limit, offset=offset)


@router.get("/{sid}", response_model=SessionView, responses=NOT_FOUND)
def get_session(row: SessionDep, settings: SettingsDep, store: StoreDep) -> SessionView:
    return view(row, store, settings)


@router.delete("/{sid}", response_model=SessionView, responses=NOT_FOUND)
def cancel_session(row: SessionDep, settings: SettingsDep, store: StoreDep, workers: WorkersDep) -> SessionView:
    """Cancel the session (a running migration stops at its next step) and remove its workspace."""
    store.update(row.id, cancel=1)
    if not workers.cancel(row.id):  # a worker that has it removes the files when its migration stops
        cancelled(settings, store, row)
    got = store.get(row.id)
    assert got is not None
    return view(got, store, settings, interrupts=False)


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


@router.post("/{sid}/approval", status_code=status.HTTP_202_ACCEPTED, response_model=SessionView,
             responses={**NOT_FOUND, 409: {"model": ErrorDetail, "description": "not waiting for approval"}})
def answer_approval(body: Approval, row: SessionDep, settings: SettingsDep, store: StoreDep) -> SessionView:
    """Approve or reject the proposed edit, or give your own version of it (files, or a unified diff)."""
    if row.state != "waiting_for_approval":
        raise HTTPException(status.HTTP_409_CONFLICT, f"session {row.id} is {row.state}, not waiting for approval")
    answer: dict[str, Any] = {"action": body.action}
    if body.amount_usd is not None:  # an approve_cost question's answer
        answer["amount_usd"] = body.amount_usd
    if body.action == "edit":
        files = body.files
        if body.diff is not None:
            try:
                files = files_from_diff(load(row.migration_id, settings.data_dir), body.diff)
            except ValueError as exc:
                raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None
        answer["files"] = files
    files_named = sorted(answer.get("files") or [])
    answered: tuple[str, dict[str, Any]] = ("approval_answer", {"action": body.action, "files": files_named})
    if not store.requeue(row.id, expect=("waiting_for_approval",), answer=answer, event=answered):
        raise HTTPException(status.HTTP_409_CONFLICT, f"session {row.id} is no longer waiting for approval "
                            "(another answer came first, or it was cancelled)")
    if body.action == "edit" and answer.get("files"):
        _keep_edit(settings, row, answer["files"])
    got = store.get(row.id)
    assert got is not None
    return view(got, store, settings, interrupts=False)

