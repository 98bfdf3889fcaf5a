"""A finished session's outputs: the patch, the report, result.json and the migrated tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Response, status
from fastapi.responses import StreamingResponse

from agent.migration import records
from agent.migration.facade import MigrationSnapshot, UnknownMigration, load
from agent.migration.render import notable_rows
from agent.service import archive
from agent.service.deps import SessionDep, SettingsDep
from agent.service.schemas import MAX_PARITY_ROWS, ErrorDetail, Result
from agent.service.store import SessionRow
from agent.service.workers import repo_dir

router = APIRouter(prefix="/v1/sessions", tags=["outputs"])
RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorDetail, "description": "no such session of yours"},
    409: {"model": ErrorDetail, "description": "the session has not finished"}}


def _state(row: SessionRow, settings: SettingsDep) -> MigrationSnapshot:
    if row.state != "finished":
        raise HTTPException(status.HTTP_409_CONFLICT, f"session {row.id} is {row.state}; its outputs come when "
                            "it has finished (watch its events)")
    try:
        return load(row.migration_id, settings.data_dir)
    except UnknownMigration:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"session {row.id}'s checkpoints are gone") from None


def _output(row: SessionRow, settings: SettingsDep, which: str) -> str:
    outputs = _state(row, settings).outputs
    path = Path(getattr(outputs, which)) if outputs is not None else None
    if path is None or not path.is_file():
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"session {row.id} finished but its {which} is gone")
    return path.read_text(encoding="utf-8")


@router.get("/{sid}/patch", responses={**RESPONSES, 200: {"content": {"text/x-diff": {}}}})
def get_patch(row: SessionDep, settings: SettingsDep) -> Response:
    """ferry.patch: a unified diff that `git apply` applies to the original repository."""
    return Response(_output(row, settings, "patch"), media_type="text/x-diff; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{row.id}.patch"'})


@router.get("/{sid}/report", responses={**RESPONSES, 200: {"content": {"text/markdown": {}}}})
def get_report(row: SessionDep, settings: SettingsDep) -> Response:
    """report.md: steps, edits with reasons, the parity table, profile findings."""
    return Response(_output(row, settings, "report"), media_type="text/markdown; charset=utf-8")


@router.get("/{sid}/result", response_model=Result, responses=RESPONSES)
def get_result(row: SessionDep, settings: SettingsDep) -> Result:
    """result.json: the verdict, iterations, runs, edits, parity, profile, model usage."""
    state = _state(row, settings)
    record = records.MigrationRecord.model_validate_json(_output(row, settings, "result"))
    parity, profile = state.parity, state.profile
    return Result(id=row.id, status=record.status, summary=record.summary, result=record,
                  parity_rows=parity.rows()[:MAX_PARITY_ROWS] if parity is not None else [],
                  parity_notable=notable_rows(parity)[:MAX_PARITY_ROWS] if parity is not None else [],
                  findings=profile.findings if profile is not None else [])


@router.get("/{sid}/archive", responses={**RESPONSES, 200: {"content": {"application/gzip": {}}},
                                        429: {"model": ErrorDetail, "description": "too many archives at once"}})
def get_archive(row: SessionDep, settings: SettingsDep) -> StreamingResponse:
    """The migrated repository as tar.gz: the session's copy with the migration's edits (streamed as it is
    built; at most a few archives are built at once, the next one is answered 429)."""
    edited = _state(row, settings).files
    try:
        body = archive.stream(row.id, repo_dir(settings, row.id), edited)
    except archive.Busy as exc:
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, str(exc), headers={"Retry-After": "5"}) from None
    return StreamingResponse(body, media_type="application/gzip",
                             headers={"Content-Disposition": f'attachment; filename="{row.id}.tar.gz"'})
