"""A finished session's outputs: the patch, the report, result.json and the migrated tree."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Response, status

from agent import records
from agent.migration import UnknownMigration, load
from agent.service.deps import SessionDep, SettingsDep
from agent.service.schemas import MAX_PARITY_ROWS, ErrorDetail, Result
from agent.service.store import SessionRow
from agent.service.workers import repo_dir
from agent.state import outputs_of, parity_of, profile_of

router = APIRouter(prefix="/v1/sessions", tags=["outputs"])
RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorDetail, "description": "no such session of yours"},
    409: {"model": ErrorDetail, "description": "the session has not finished"}}


def _state(row: SessionRow, settings: SettingsDep) -> dict[str, Any]:
    if row.state != "finished":
        raise HTTPException(status.HTTP_409_CONFLICT, f"session {row.id} is {row.state}; its outputs come when "
                            "it has finished (watch its events)")
    try:
        return load(row.migration_id, settings.data_dir)
    except UnknownMigration:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"session {row.id}'s checkpoints are gone") from None


def _output(row: SessionRow, settings: SettingsDep, which: str) -> str:
    outputs = outputs_of(_state(row, settings))
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
    parity, profile = parity_of(state), profile_of(state)
    return Result(id=row.id, status=record.status, summary=record.summary, result=record,
                  parity_rows=parity.rows()[:MAX_PARITY_ROWS] if parity is not None else [],
                  findings=profile.findings if profile is not None else [])


def _regular_files(root: Path) -> list[str]:
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        out.extend((Path(dirpath) / n).relative_to(root).as_posix() for n in filenames
                   if (Path(dirpath) / n).is_file() and not (Path(dirpath) / n).is_symlink())
    return out


@router.get("/{sid}/archive", responses={**RESPONSES, 200: {"content": {"application/gzip": {}}}})
def get_archive(row: SessionDep, settings: SettingsDep) -> Response:
    """The migrated repository as tar.gz: the session's copy with the migration's edits."""
    edited: dict[str, str] = dict(_state(row, settings).get("files") or {})
    root = repo_dir(settings, row.id)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        names = sorted({*_regular_files(root), *edited})
        for rel in names:
            data = edited[rel].encode() if rel in edited else (root / rel).read_bytes()
            info = tarfile.TarInfo(f"{row.id}/{rel}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return Response(buf.getvalue(), media_type="application/gzip",
                    headers={"Content-Disposition": f'attachment; filename="{row.id}.tar.gz"'})
