"""Request and response bodies of the service."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from agent import records

State = Literal["running", "waiting_for_approval", "finished", "stopped", "failed"]


class ErrorDetail(BaseModel):
    detail: str = Field(description="what was wrong and what to do")


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class MigrationCreate(BaseModel):
    path: str = Field(min_length=1, description="repository directory on the server's filesystem")
    run: str = Field(description="the command that runs the program, e.g. 'python train.py'")
    test: str | None = Field(default=None, description="the test command, e.g. 'python -m pytest -q'")
    out: str | None = Field(default=None, description="directory on the server for ferry.patch, report.md, result.json")
    llm: bool = False
    approve: bool = Field(default=False, description="pause before every edit that is not a catalogue codemod")
    apply: bool = Field(default=False, description="write the verified patch into the repository at the end")
    device: Literal["accelerator", "tpx"] = "accelerator"
    max_iterations: int = Field(default=8, ge=0)
    run_timeout_s: float = Field(default=600.0, gt=0)
    max_wall_s: float | None = Field(default=None, gt=0, description=(
        "wall-time budget of the whole migration; a run that cannot finish in what is left is not started "
        "(failed_budget)"))
    seed: int = 0
    python: str | None = Field(default=None, description="the interpreter the code runs with, on the server "
                                                          "(default: the server's own); needs torch==2.13.0")
    env: dict[str, str] = Field(default_factory=dict, description="the user's own variables for every run")
    cwd: str | None = Field(default=None, description="where every run starts, relative to the repository")

    @field_validator("python")
    @classmethod
    def _python_absolute(cls, v: str | None) -> str | None:
        # Only checked for its form here: the route runs it (to inspect it) only when the server's
        # operator allowed it (``ferry serve --python PATH``); a client never makes the server start
        # a binary of its choosing.
        if v is not None and not Path(v).is_absolute():
            raise ValueError(f"python must be an absolute path on the server, got {v!r}")
        return v

    @field_validator("env")
    @classmethod
    def _env_allowed(cls, v: dict[str, str]) -> dict[str, str]:
        from tools.runner.env import user_env_problem

        for key, value in v.items():
            if (problem := user_env_problem(key, value)) is not None:
                raise ValueError(problem)
        return v

    @field_validator("cwd")
    @classmethod
    def _cwd_inside(cls, v: str | None) -> str | None:
        from tools.runner.models import cwd_problem

        if v is not None and (problem := cwd_problem(v)) is not None:
            raise ValueError(problem)
        return v

    @field_validator("run")
    @classmethod
    def _run_not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("run must be the command that runs the program (e.g. 'python train.py'), not empty")
        return v.strip()

    @field_validator("out")
    @classmethod
    def _out_writable(cls, v: str | None) -> str | None:
        if v is None:
            return v
        from agent.outpaths import check_output_dir

        return str(check_output_dir(v, "out"))  # OutputPathError is a ValueError: a 422 with its message

    @field_validator("test")
    @classmethod
    def _test_not_blank(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("test must be a command (e.g. 'python -m pytest -q') or left out, not empty")
        return v.strip() if v else v


class MigrationCreated(BaseModel):
    id: str
    status_url: str


class MigrationStatus(BaseModel):
    id: str
    state: State = Field(description="running | waiting_for_approval (see interrupts) | finished | "
                                      "stopped (POST .../resume continues it) | failed (no checkpoint; see error)")
    status: str | None = Field(default=None, description="the named status once finished (migrated, partial, ...)")
    summary: str | None = None
    iteration: int = 0
    runs: int = 0
    pending: list[str] = Field(default_factory=list, description="graph nodes still to run")
    interrupts: list[dict[str, Any]] = Field(default_factory=list,
                                             description="approval questions: rule, site, reason, diff")
    steps: list[records.Step] = Field(default_factory=list)
    error: str | None = None
    owner: str | None = Field(default=None, description="the process driving it now (pid, host, since), "
                                                        "when it is another process than this server's own job")


class MigrationResult(BaseModel):
    id: str
    status: str
    summary: str | None = None
    patch: str = Field(description="ferry.patch: unified diff, git-apply-able to the original repository")
    report: str = Field(description="report.md: steps, edits with reasons, parity table, profile findings")
    result: records.MigrationRecord = Field(description="result.json: iterations, runs, LLM usage, edits, parity, ...")


def _repo_relative(path: str) -> str:
    p = PurePosixPath(path.replace("\\", "/"))
    if not path.strip() or p.is_absolute() or ".." in p.parts:
        raise ValueError(f"files keys must be paths relative to the repository (no '..', not absolute), got {path!r}")
    return str(p)


class Decision(BaseModel):
    action: Literal["approve", "reject", "edit"] = Field(
        description="approve: apply the proposed edit; reject: stop with status 'rejected'; "
                    "edit: apply your files instead (verified the same way)")
    files: dict[str, str] | None = Field(default=None, description="for action=edit only: repo path -> new text")

    @model_validator(mode="after")
    def _files_match_action(self) -> Decision:
        if self.action == "edit":
            if not self.files:
                raise ValueError("action=edit needs files: {repo path: new text}")
            self.files = {_repo_relative(k): v for k, v in self.files.items()}
        elif self.files:
            raise ValueError(f"files go with action=edit only, not action={self.action}")
        return self
