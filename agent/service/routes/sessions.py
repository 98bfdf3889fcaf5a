"""Sessions: create (an upload or an allowed server path), list, read, cancel, answer an approval."""

from __future__ import annotations

import logging
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.concurrency import run_in_threadpool

from agent.migration.facade import UnknownMigration, load
from agent.service import operations
from agent.service.bodies import read_create
from agent.service.deps import OwnerDep, SessionDep, SettingsDep, StoreDep, WorkersDep
from agent.service.leftovers import UPLOAD_PREFIX
from agent.service.schemas import (
    Approval,
    ErrorDetail,
    SessionCreated,
    SessionList,
    SessionOptions,
    SessionState,
    SessionView,
)
from agent.service.settings import ServiceSettings
from agent.service.shown import session_paths, shown_data
from agent.service.store import SessionRow, SessionStore

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


def _too_busy(waiting: int) -> HTTPException:
    return HTTPException(status.HTTP_429_TOO_MANY_REQUESTS,
                         f"{waiting} sessions are waiting for a worker (the queue is full); try again later",
                         headers={"Retry-After": str(RETRY_AFTER_S)})


def _checked(opts: SessionOptions, settings: ServiceSettings) -> SessionOptions:
    try:
        return operations.check_options(opts, settings)
    except operations.OptionRefused as exc:
        raise _unprocessable(exc.field, str(exc), exc.value) from None


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
        opts = await run_in_threadpool(_checked, body.options, settings)  # may start an interpreter
        sid = operations.new_session_id()
        try:
            source = await run_in_threadpool(operations.populate, settings, sid, body.path, body.archive,
                                            body.archive_name)
        except operations.BadSource as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
    try:  # off the event loop: the commit waits for the disk (synchronous=FULL)
        await run_in_threadpool(operations.register, settings, store, sid, owner, opts, source)
    except operations.TooBusy as exc:
        raise _too_busy(exc.waiting) from None
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
    return view(operations.cancel(settings, store, workers, row), store, settings, interrupts=False)


@router.post("/{sid}/approval", status_code=status.HTTP_202_ACCEPTED, response_model=SessionView,
             responses={**NOT_FOUND, 409: {"model": ErrorDetail, "description": "not waiting for approval"}})
def answer_approval(body: Approval, row: SessionDep, settings: SettingsDep, store: StoreDep) -> SessionView:
    """Approve or reject the proposed edit, or give your own version of it (files, or a unified diff)."""
    try:
        got = operations.answer(settings, store, row, body)
    except operations.NotWaiting as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    except operations.BadAnswer as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None
    return view(got, store, settings, interrupts=False)
