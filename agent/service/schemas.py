"""Request and response bodies of the service."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class MigrationCreate(BaseModel):
    path: str = Field(description="repository directory on the server's filesystem")
    run: str = Field(min_length=1, description="the command that runs the program")
    test: str | None = None
    out: str | None = None
    llm: bool = False
    approve: bool = False
    apply: bool = False
    device: Literal["accelerator", "tpx"] = "accelerator"
    max_iterations: int = Field(default=8, ge=0)
    run_timeout_s: float = Field(default=600.0, gt=0)
    seed: int = 0


class MigrationCreated(BaseModel):
    id: str
    status_url: str


class MigrationStatus(BaseModel):
    id: str
    state: Literal["running", "waiting_for_approval", "finished", "stopped"]
    status: str | None = None
    summary: str | None = None
    iteration: int = 0
    runs: int = 0
    pending: list[str] = Field(default_factory=list)
    interrupts: list[dict[str, Any]] = Field(default_factory=list)
    steps: list[dict[str, Any]] = Field(default_factory=list)
    error: str | None = None


class Decision(BaseModel):
    action: Literal["approve", "reject", "edit"]
    files: dict[str, str] | None = Field(default=None, description="for action=edit: repo path -> new text")
