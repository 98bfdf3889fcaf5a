"""HTTP routes: a thin layer over agent.migration (start / resume / load)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, status
from fastapi.exceptions import RequestValidationError

from agent import records
from agent.early import new_migration_id
from agent.llm.config import resolve_limits
from agent.locks import lock_holder
from agent.migration import UnknownMigration, load, resume, start
from agent.service.deps import Authorized, JobsDep, Settings, SettingsDep
from agent.service.schemas import (
    Decision,
    ErrorDetail,
    MigrationCreate,
    MigrationCreated,
    MigrationResult,
    MigrationStatus,
    State,
)
from agent.state import MigrationOptions, outputs_of, runs_of, status_of, steps_of, with_llm_limits
from sandbox.execute import start_directory
from tools.runner.interpreter import InterpreterError, ferrys_interpreter, inspect_interpreter

router = APIRouter(prefix="/migrations", dependencies=[Authorized], tags=["migrations"],
                   responses={401: {"model": ErrorDetail, "description": "missing or wrong bearer token"}})

Responses = dict[int | str, dict[str, Any]]
NOT_FOUND: Responses = {404: {"model": ErrorDetail,
                              "description": "no migration with this id in the server's state dir"}}
CONFLICT: Responses = {409: {"model": ErrorDetail, "description": "the migration is not in a state that allows this"}}


def _status(mid: str, settings: SettingsDep, jobs: JobsDep) -> MigrationStatus:
    # Asked before loading: a job that ends between the two would otherwise leave a snapshot taken
    # mid-step (a pending node, no interrupt yet) to be read as "stopped".
    running = jobs.running(mid)
    owner = None if running else lock_holder(Path(settings.state_dir), mid)
    running = running or owner is not None
    try:
        st = load(mid, settings.state_dir)
    except UnknownMigration:
        if running or jobs.running(mid):
            return MigrationStatus(id=mid, state="running")
        if mid in jobs.errors:  # it failed before writing its first checkpoint
            return MigrationStatus(id=mid, state="failed", error=jobs.errors[mid])
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no migration {mid}") from None
    state: State
    if running:
        state = "running"
    elif st["interrupts"]:
        state = "waiting_for_approval"
    elif st["pending"]:
        state = "stopped"  # killed, crashed or the server restarted mid-way: POST /migrations/{id}/resume
    else:
        state = "finished"
    return MigrationStatus(id=mid, state=state, status=status_of(st), summary=st.get("summary"),
                           iteration=st.get("iteration") or 0, runs=len(runs_of(st)),
                           pending=st["pending"], interrupts=st["interrupts"], steps=steps_of(st),
                           error=jobs.errors.get(mid), owner=owner.describe() if owner is not None else None)


def _allowed_python(python: str | None, settings: Settings) -> str | None:
    """The request's interpreter, when the server's operator allowed it; 422 otherwise (nothing is started)."""
    if python is None:
        return None

    def refuse(msg: str) -> RequestValidationError:
        return RequestValidationError([{"type": "value_error", "loc": ("body", "python"), "msg": msg, "input": python}])

    # by the path as written (normalised, links kept): a venv's bin/python links to the same binary
    # as every other venv's, and the link is what selects the venv
    allowed = {os.path.abspath(p) for p in (*settings.pythons, ferrys_interpreter())}
    if os.path.abspath(python) not in allowed:
        named = ", ".join(sorted(settings.pythons)) or "none besides its own"
        raise refuse(f"this server runs code only with the interpreters its operator allowed ({named}); "
                     "start it with 'ferry serve --python PATH' to allow another, or leave python out")
    try:
        interp = inspect_interpreter(python)
    except InterpreterError as exc:
        raise refuse(str(exc)) from exc
    return None if interp.is_ferrys else interp.path


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=MigrationCreated)
def create(body: MigrationCreate, settings: SettingsDep, jobs: JobsDep) -> MigrationCreated:
    src = Path(body.path).expanduser()
    if not src.is_dir():
        msg = f"{body.path} is not a directory on the server; give the repository's absolute path there"
        raise RequestValidationError([{"type": "value_error", "loc": ("body", "path"), "msg": msg, "input": body.path}])
    if body.cwd is not None:
        try:
            start_directory(src.resolve(), body.cwd)  # the runner's own check, on the repository itself
        except ValueError as exc:
            msg = f"{exc} {src}"
            raise RequestValidationError([{"type": "value_error", "loc": ("body", "cwd"), "msg": msg,
                                           "input": body.cwd}]) from None
    python = _allowed_python(body.python, settings)
    try:  # the model's limits: the server's FERRY_LLM_* or the defaults
        limits = resolve_limits({})
    except ValueError as exc:  # the operator's setting, not the request's
        raise HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR,
                            f"the server's LLM settings are invalid: {exc}") from exc
    opts = MigrationOptions(source=str(src.resolve()), run_command=body.run, test_command=body.test, out_dir=body.out,
                            state_dir=settings.state_dir, llm=body.llm, approve=body.approve, apply=body.apply,
                            device=body.device, max_iterations=body.max_iterations, run_timeout_s=body.run_timeout_s,
                            max_wall_s=body.max_wall_s, seed=body.seed, python=python, env=dict(body.env), cwd=body.cwd)
    opts = with_llm_limits(opts, limits)
    mid = new_migration_id()
    jobs.submit(mid, lambda: start(opts, migration_id=mid, runs=jobs.runs))
    return MigrationCreated(id=mid, status_url=f"/migrations/{mid}")


@router.get("/{mid}", response_model=MigrationStatus, responses=NOT_FOUND)
def get_status(mid: str, settings: SettingsDep, jobs: JobsDep) -> MigrationStatus:
    return _status(mid, settings, jobs)


@router.get("/{mid}/result", response_model=MigrationResult, responses={**NOT_FOUND, **CONFLICT})
def get_result(mid: str, settings: SettingsDep, jobs: JobsDep) -> MigrationResult:
    st = _status(mid, settings, jobs)
    if st.state != "finished":
        raise HTTPException(status.HTTP_409_CONFLICT, f"migration {mid} is {st.state}; no result yet")
    outputs = outputs_of(load(mid, settings.state_dir))
    paths = {k: Path(v) for k, v in (outputs.model_dump() if outputs else {}).items() if k != "dir"}
    missing = [k for k in ("result", "patch", "report") if k not in paths or not paths[k].is_file()]
    if missing:
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            f"migration {mid} finished but its {', '.join(missing)} output is gone from the server")
    result = records.MigrationRecord.model_validate_json(paths["result"].read_text(encoding="utf-8"))
    return MigrationResult(id=mid, status=result.status, summary=result.summary,
                           patch=paths["patch"].read_text(encoding="utf-8"),
                           report=paths["report"].read_text(encoding="utf-8"), result=result)


@router.post("/{mid}/decision", status_code=status.HTTP_202_ACCEPTED, response_model=MigrationStatus,
             responses={**NOT_FOUND, **CONFLICT})
def decide(mid: str, body: Decision, settings: SettingsDep, jobs: JobsDep) -> MigrationStatus:
    st = _status(mid, settings, jobs)
    if st.state != "waiting_for_approval":
        raise HTTPException(status.HTTP_409_CONFLICT, f"migration {mid} is {st.state}, not waiting for approval")
    answer = body.model_dump(exclude_none=True)
    jobs.submit(mid, lambda: resume(mid, settings.state_dir, answer=answer, runs=jobs.runs))
    return MigrationStatus(id=mid, state="running", pending=st.pending)


@router.post("/{mid}/resume", status_code=status.HTTP_202_ACCEPTED, response_model=MigrationStatus,
             responses={**NOT_FOUND, **CONFLICT})
def resume_stopped(mid: str, settings: SettingsDep, jobs: JobsDep) -> MigrationStatus:
    st = _status(mid, settings, jobs)
    if st.state != "stopped":
        hint = "; start a new one" if st.state == "failed" else ""
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"migration {mid} is {st.state}; only a stopped one resumes{hint}")
    jobs.submit(mid, lambda: resume(mid, settings.state_dir, runs=jobs.runs))
    return MigrationStatus(id=mid, state="running", pending=st.pending)
