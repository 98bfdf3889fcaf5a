"""The MCP tools' arguments and results that the tools themselves do not already define.

Scan and rewrite take the scan tool's own requests; run, check and profile take a safe subset of the
runner's and the checker's (where artifacts go and how the sandbox is built are the server's to say);
their results are the tools' own models.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agent.migration.records import Plan
from agent.service.schemas import SessionOptions
from tools.scan.models import RewriteRequest, ScanRequest
from tools.scan.models import ScanSummary as ScanSummary


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScanArgs(ScanRequest):
    """Find the CUDA idioms of a repository (or one .py/.ipynb file): rule ids, sites, categories."""

    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="the repository folder (or one file) on the server, absolute or relative to the "  # type: ignore[assignment]
                                  "server's working directory; it must lie under one of its allowed roots")


class RewriteArgs(RewriteRequest):
    """Apply the auto-fix codemods; returns the diff. The repository is written only with write=true (stdio only)."""

    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="the repository folder (or one file), under one of the server's allowed roots")  # type: ignore[assignment]
    write: bool = Field(default=False, description="write the rewritten files into the repository (a local "
                                                   "server over stdio only; default: only return the diff)")


class PlanArgs(_Strict):
    """What a migration of this repository would do: files the codemods rewrite, findings left for review, checks."""

    path: str = Field(description="the repository folder, under one of the server's allowed roots")
    run: str | None = Field(default=None, max_length=4000, description="the command that runs the program")
    test: str | None = Field(default=None, max_length=4000, description="the test command")
    device: Literal["accelerator", "tpx"] = "accelerator"


class PlanResult(BaseModel):
    plan: Plan
    summary: str


class RunArgs(_Strict):
    """Run a command of the repository in Ferry's sandbox (on a private copy), on tpx or CPU, CUDA redirected."""

    path: str = Field(description="the repository folder, under one of the server's allowed roots")
    command: list[str] | str = Field(description="argv, or one string run with /bin/sh -c")
    device: Literal["tpx", "cpu"] = "tpx"
    redirect_cuda: bool = Field(default=True, description="run the CUDA calls of unmigrated code on the device")
    probe: bool = Field(default=False, description="record module outputs for a later parity comparison")
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    timeout_s: float = Field(default=600.0, gt=0, le=6 * 3600, description="capped by the server's per-call limit")
    env: dict[str, str] = Field(default_factory=dict, max_length=64,
                                description="FERRY_*/TPX_* settings, and your own plain variables for the program")
    cwd: str | None = Field(default=None, max_length=1000, description="where the command starts, in the repository")


class CheckArgs(_Strict):
    """The same command on CPU (reference) and tpx (target): parity with the first divergence, and a profile."""

    path: str = Field(description="the repository folder, under one of the server's allowed roots")
    command: str = Field(max_length=4000, description="the command that runs the program, e.g. 'python train.py'")
    steps: int = Field(default=2, ge=1, le=1000, description="steps whose module calls are recorded")
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    timeout_s: float = Field(default=600.0, gt=0, le=6 * 3600, description="seconds per run (capped by the server)")
    profile: bool = True
    target_env: dict[str, str] = Field(default_factory=dict, max_length=64,
                                       description="FERRY_*/TPX_* settings for the target run only, e.g. "
                                                   "TPX_MATMUL_PRECISION=highest to test a cause")
    cwd: str | None = Field(default=None, max_length=1000)


class ProfileArgs(_Strict):
    """Profile a run on tpx: host syncs, CPU fallbacks, copies, slow ops, each with file:line in the repository."""

    path: str = Field(description="the repository folder, under one of the server's allowed roots")
    command: str = Field(max_length=4000, description="the command that runs the program")
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    timeout_s: float = Field(default=600.0, gt=0, le=6 * 3600)
    cwd: str | None = Field(default=None, max_length=1000)


class MigrateArgs(SessionOptions):
    """Start a migration of a repository (Ferry's full loop: rewrite, run on tpx, tests, parity, profile).

    Long work: it runs as a task on the server. This call returns after wait_s seconds (or when the migration
    ends or waits for an approval) with its id and state, sending progress notifications meanwhile; follow it
    with `status`, answer an approval with `resume`, stop it with `cancel`."""

    path: str = Field(description="the repository folder, under one of the server's allowed roots (Ferry "
                                  "migrates a copy: the repository itself is never changed)")
    wait_s: float = Field(default=30.0, ge=0, le=600, description="seconds to wait for the end before returning")


class TaskArgs(_Strict):
    """A migration by its id."""

    id: str = Field(max_length=80, description="the migration's id, as `migrate` returned it")
    wait_s: float = Field(default=0.0, ge=0, le=600, description="seconds to wait for it to end or to need an "
                                                                  "answer (progress notifications meanwhile)")


class ResumeArgs(_Strict):
    """Answer the approval a migration waits for (approve or reject the proposed edit), then follow it."""

    id: str = Field(max_length=80)
    action: Literal["approve", "reject"]
    wait_s: float = Field(default=30.0, ge=0, le=600)


class CancelArgs(_Strict):
    """Stop a migration (its run in flight ends, its workspace is removed; its events stay)."""

    id: str = Field(max_length=80)


class Verdict(BaseModel):
    """Ferry's verdict on a migration, and what it rests on. ``migrated`` is claimed only when the work ran on
    the device, the tests passed and parity passed, on the tree Ferry copied; ``stale`` says the repository
    changed since that copy, so the verdict does not cover what is there now."""

    status: str | None = Field(default=None, description="the migration's named status once finished")
    migrated: bool = Field(description="true only for status 'migrated' on the tree as it is now")
    stale: bool = Field(default=False, description="the repository changed after Ferry copied it")
    reason: str = ""


class MigrationView(BaseModel):
    id: str
    state: str = Field(description="queued | running | waiting_for_approval | finished | failed | cancelled")
    step: str | None = None
    summary: str | None = None
    verdict: Verdict
    question: str | None = Field(default=None, description="what the migration asks, when it waits for an answer")
    resources: list[str] = Field(default_factory=list, description="URIs of its patch, report and result")
    error: str | None = None


class ExplainArgs(_Strict):
    """Explain a rule (FRY013, a policy rule), a migration's verdict, or the edit at a line of a migration."""

    rule: str | None = Field(default=None, max_length=40, description="a rule id, e.g. FRY013")
    id: str | None = Field(default=None, max_length=80, description="a migration id (its verdict, or an edit)")
    file: str | None = Field(default=None, max_length=1000, description="with id: a file the migration changed")
    line: int | None = Field(default=None, ge=1, description="with id and file: a line of that file")


class Explanation(BaseModel):
    text: str
    docs: list[str] = Field(default_factory=list, description="links to the documentation shipped with Ferry")


class KnowledgeArgs(_Strict):
    """Search Ferry's knowledge base (rules with examples, site fixes, policy, numerics tiers, earlier fixes)."""

    query: str = Field(min_length=1, max_length=2000)
    k: int = Field(default=5, ge=1, le=20)


class KnowledgeHit(BaseModel):
    kind: str
    id: str
    title: str
    text: str
    example: str = ""
    cite: str | None = Field(default=None, description="the rule's section in Ferry's shipped documentation")


class KnowledgeResult(BaseModel):
    hits: list[KnowledgeHit]
