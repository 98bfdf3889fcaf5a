"""Request and response bodies of the /v1 service."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent.migration import records
from tools.parity.models import TensorComparison
from tools.profile.models import ProfileFinding

MAX_PARITY_ROWS = 500
SessionState = Literal["queued", "running", "waiting_for_approval", "finished", "failed", "cancelled"]


class ErrorDetail(BaseModel):
    detail: str = Field(description="what was wrong and what to do")


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Ready(BaseModel):
    status: Literal["ok", "fail"]
    checks: dict[str, str] = Field(description="each check: 'ok' or 'fail' (GET /readyz), 'ok: where' or "
                                               "'fail: why' (GET /v1/ready, with a token)")


class SessionOptions(BaseModel):
    """What the migration is asked to do (the server decides where it reads and writes)."""

    model_config = ConfigDict(extra="forbid")

    run: str = Field(max_length=4000, description="the command that runs the program, e.g. 'python train.py'")
    test: str | None = Field(default=None, max_length=4000, description="the test command, e.g. 'python -m pytest -q'")
    device: Literal["accelerator", "tpx"] = "accelerator"
    llm: bool | None = Field(default=None, description="use the model the server is configured with "
                                                        "(FERRY_LLM_*); default: on when it has one")
    approve: bool = Field(default=False, description="pause before every edit that is not a catalogue codemod")
    max_iterations: int = Field(default=8, ge=0, le=64)
    run_timeout_s: float = Field(default=600.0, gt=0, le=6 * 3600)
    max_wall_s: float | None = Field(default=None, gt=0, le=24 * 3600, description=(
        "wall-time budget of the whole migration; a run that cannot finish in what is left is not started"))
    seed: int = Field(default=0, ge=0, le=2**32 - 1, description="seed of every run (random, numpy, torch)")
    python: str | None = Field(default=None, max_length=1000, description=(
        "the interpreter on the server the code runs with (one the operator allowed with --python)"))
    env: dict[str, str] = Field(default_factory=dict, max_length=64, description=(
        "variables of your own for every run; they reach only the sandboxed program, and loader, interpreter and "
        "shell variables (LD_*, PYTHON* but PYTHONPATH, BASH_ENV...), Ferry's own and credentials are refused"))
    cwd: str | None = Field(default=None, max_length=1000, description="where every run starts, in the repository")
    skip_rules: list[str] = Field(default_factory=list, max_length=200, description="rule ids to leave out")

    @field_validator("python")
    @classmethod
    def _python_absolute(cls, v: str | None) -> str | None:
        # Only its form here: the route inspects it only when the operator allowed it.
        if v is not None and not Path(v).is_absolute():
            raise ValueError(f"python must be an absolute path on the server, got {v!r}")
        return v

    @field_validator("env")
    @classmethod
    def _env_allowed(cls, v: dict[str, str]) -> dict[str, str]:
        from tools.runner.env import user_env_problems

        if (problem := user_env_problems(v)) is not None:
            raise ValueError(problem)
        return v

    @field_validator("cwd")
    @classmethod
    def _cwd_inside(cls, v: str | None) -> str | None:
        from tools.runner.models import cwd_problem

        if v is not None and (problem := cwd_problem(v)) is not None:
            raise ValueError(problem)
        return v

    @field_validator("skip_rules")
    @classmethod
    def _rules_known(cls, v: list[str]) -> list[str]:
        from agent.policy.catalogue import unknown_rule_message

        for rule in v:
            if (problem := unknown_rule_message(rule)) is not None:
                raise ValueError(problem)
        return sorted(set(v))

    @field_validator("run")
    @classmethod
    def _run_not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("run must be the command that runs the program (e.g. 'python train.py'), not empty")
        return v.strip()

    @field_validator("test")
    @classmethod
    def _test_not_blank(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("test must be a command (e.g. 'python -m pytest -q') or left out, not empty")
        return v.strip() if v else v


class SessionCreate(BaseModel):
    """A JSON create: a repository already on the server, under one of its --allow-root directories."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, max_length=4096, description="the repository directory on the server")
    options: SessionOptions


class SessionSource(BaseModel):
    kind: Literal["path", "archive"]
    name: str = Field(description="the server path, or the uploaded file's name")
    files: int = 0


class SessionCreated(BaseModel):
    id: str
    status_url: str
    events_url: str


class SessionView(BaseModel):
    id: str
    owner: str
    state: SessionState = Field(description="queued | running | waiting_for_approval (see interrupts) | "
                                            "finished | failed (see error) | cancelled")
    status: str | None = Field(default=None, description="the migration's named status once finished")
    step: str | None = Field(default=None, description="the node running now, or the last one that ran")
    summary: str | None = None
    attempt: int = 1
    counts: dict[str, int] = Field(default_factory=dict, description="steps, edits, runs, messages, events")
    created_at: str
    updated_at: str
    options: SessionOptions
    source: SessionSource
    interrupts: list[dict[str, Any]] = Field(default_factory=list,
                                             description="approval questions: rule, site, reason, diff")
    error: str | None = None


class SessionList(BaseModel):
    items: list[SessionView]
    total: int
    limit: int
    offset: int


def _repo_relative(path: str) -> str:
    p = PurePosixPath(path.replace("\\", "/"))
    if not path.strip() or p.is_absolute() or ".." in p.parts:
        raise ValueError(f"files keys must be paths relative to the repository (no '..', not absolute), got {path!r}")
    return str(p)


class Approval(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["approve", "reject", "edit"] = Field(
        description="approve: apply the proposed edit; reject: stop with status 'rejected'; "
                    "edit: apply your own version instead (files, or a diff against the proposal's files)")
    files: dict[str, str] | None = Field(default=None, description="for edit: repo path -> new text")
    diff: str | None = Field(default=None, max_length=2_000_000,
                             description="for edit: a unified diff, applied to the files as they were before "
                                         "the proposed edit")
    amount_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False, description=(
        "for approve of an approve_cost question: US dollars to allow beyond the cost cap (default: the "
        "question's suggested_usd)"))

    @model_validator(mode="after")
    def _matches_action(self) -> Approval:
        if self.action == "edit":
            if not self.files and not self.diff:
                raise ValueError("action=edit needs files ({repo path: new text}) or diff (a unified diff)")
            if self.files and self.diff:
                raise ValueError("give files or diff, not both")
            if self.files:
                self.files = {_repo_relative(k): v for k, v in self.files.items()}
        elif self.files or self.diff:
            raise ValueError(f"files and diff go with action=edit only, not action={self.action}")
        return self


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=4000, description="what you say to the agent")


class MessageReply(BaseModel):
    event_id: int = Field(description="the id of the reply's event in the session's stream")
    text: str
    intent: str
    action: dict[str, Any] | None = None


class Result(BaseModel):
    id: str
    status: str
    summary: str | None = None
    result: records.MigrationRecord
    parity_rows: list[TensorComparison] = Field(default_factory=list, description=(
        "the parity table: every compared tensor and printed metric, reference vs target, with its tolerances "
        f"and verdict (the first {MAX_PARITY_ROWS})"))
    parity_notable: list[TensorComparison] = Field(default_factory=list, description=(
        "the rows shown before the full table, as report.md shows them: the failing and warning ones, else the "
        f"worst few by max abs (the first {MAX_PARITY_ROWS})"))
    findings: list[ProfileFinding] = Field(default_factory=list, description="the profile's findings (file:line, what, "
                                                                      "suggestion)")
