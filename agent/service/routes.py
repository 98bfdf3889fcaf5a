"""HTTP routes: a thin layer over agent.migration (start / resume / load)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from fastapi import APIRouter, HTTPException, status

from agent.migration import UnknownMigration, load, new_migration_id, resume, start
from agent.service.deps import Authorized, JobsDep, SettingsDep
from agent.service.schemas import Decision, MigrationCreate, MigrationCreated, MigrationStatus
from agent.state import MigrationOptions

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/migrations", dependencies=[Authorized], tags=["migrations"])


def _status(mid: str, settings: SettingsDep, jobs: JobsDep) -> MigrationStatus:
    try:
        st = load(mid, settings.state_dir)
    except UnknownMigration:
        if jobs.running(mid):
            return MigrationStatus(id=mid, state="running")
        if mid in jobs.errors:
            return MigrationStatus(id=mid, state="stopped", error=jobs.errors[mid])
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no migration {mid}") from None
    if jobs.running(mid):
        state = "running"
    elif st["interrupts"]:
        state = "waiting_for_approval"
    elif st["pending"]:
        state = "stopped"  # killed or crashed mid-way: POST /migrations/{id}/resume continues it
    else:
        state = "finished"
    return MigrationStatus(id=mid, state=state, status=st.get("status"), summary=st.get("summary"),
                           iteration=st.get("iteration") or 0, runs=len(st.get("runs") or []),
                           pending=st["pending"], interrupts=st["interrupts"], steps=st.get("steps") or [],
                           error=jobs.errors.get(mid))


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=MigrationCreated)
def create(body: MigrationCreate, settings: SettingsDep, jobs: JobsDep) -> MigrationCreated:
    src = Path(body.path).expanduser()
    if not src.is_dir():
        raise HTTPException(422, f"{body.path} is not a directory on the server")
    opts = MigrationOptions(source=str(src.resolve()), run_command=body.run, test_command=body.test, out_dir=body.out,
                            state_dir=settings.state_dir, llm=body.llm, approve=body.approve, apply=body.apply,
                            device=body.device, max_iterations=body.max_iterations, run_timeout_s=body.run_timeout_s,
                            seed=body.seed)
    mid = new_migration_id()
    jobs.submit(mid, lambda: start(opts, migration_id=mid))
    return MigrationCreated(id=mid, status_url=f"/migrations/{mid}")


@router.get("/{mid}", response_model=MigrationStatus)
def get_status(mid: str, settings: SettingsDep, jobs: JobsDep) -> MigrationStatus:
    return _status(mid, settings, jobs)


@router.get("/{mid}/result")
def get_result(mid: str, settings: SettingsDep, jobs: JobsDep) -> dict:
    st = _status(mid, settings, jobs)
    if st.state != "finished":
        raise HTTPException(status.HTTP_409_CONFLICT, f"migration {mid} is {st.state}; no result yet")
    outputs = load(mid, settings.state_dir).get("outputs") or {}
    path = outputs.get("result")
    if not path or not Path(path).is_file():
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"migration {mid} wrote no result.json")
    return json.loads(Path(path).read_text(encoding="utf-8"))


@router.post("/{mid}/decision", status_code=status.HTTP_202_ACCEPTED, response_model=MigrationStatus)
def decide(mid: str, body: Decision, settings: SettingsDep, jobs: JobsDep) -> MigrationStatus:
    st = _status(mid, settings, jobs)
    if st.state != "waiting_for_approval":
        raise HTTPException(status.HTTP_409_CONFLICT, f"migration {mid} is {st.state}, not waiting for approval")
    if body.action == "edit" and not body.files:
        raise HTTPException(422, "action=edit needs files: {path: new text}")
    answer = body.model_dump(exclude_none=True)
    jobs.submit(mid, lambda: resume(mid, settings.state_dir, answer=answer))
    return MigrationStatus(id=mid, state="running", pending=st.pending)


@router.post("/{mid}/resume", status_code=status.HTTP_202_ACCEPTED, response_model=MigrationStatus)
def resume_stopped(mid: str, settings: SettingsDep, jobs: JobsDep) -> MigrationStatus:
    st = _status(mid, settings, jobs)
    if st.state != "stopped":
        raise HTTPException(status.HTTP_409_CONFLICT, f"migration {mid} is {st.state}; only a stopped one resumes")
    jobs.submit(mid, lambda: resume(mid, settings.state_dir))
    return MigrationStatus(id=mid, state="running", pending=st.pending)
