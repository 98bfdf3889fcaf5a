"""What a sweep is asked (its options) and what it answers: one result per repository, and the run's end."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Outcome = Literal["opened", "updated", "would_open", "clean", "no_changes", "not_migrated", "skipped", "failed",
                  "not_reached"]
# the outcomes that stand for the commit they were found at: a later sweep of the same commit skips the repository
RECORDED: frozenset[str] = frozenset({"opened", "updated", "clean", "no_changes", "not_migrated"})


class SweepOptions(BaseModel):
    run_command: str = Field(description="the command that runs each repository's program (as the label's)")
    test_command: str | None = None
    max_prs: int = Field(default=5, ge=0, description="migrations (each a pull request opened or updated) a run")
    delay_s: float = Field(default=10.0, ge=0, description="pause before each pull request after the first")
    max_wait_s: float = Field(default=900.0, ge=0, description="longest wait for GitHub's rate limit; "
                                                               "longer, and the sweep stops")
    max_size_mb: float = Field(default=2048.0, ge=0, description="a repository GitHub lists as larger is not "
                                                                   "cloned (a clone fills the bot's disk)")
    reserve: int = Field(default=50, ge=0, description="requests kept back: below, wait for the window to reset")
    dry_run: bool = Field(default=False, description="scan and report; open nothing, record nothing")


class RepoResult(BaseModel):
    repo: str
    outcome: Outcome
    reason: str = Field(description="why it was skipped, what the scan found, how the migration ended")
    sha: str | None = Field(default=None, description="the default branch's commit it was swept at")
    findings: int | None = Field(default=None, description="the scan's CUDA findings (None: not scanned)")
    pr_url: str | None = None


class SweepReport(BaseModel):
    org: str
    repositories: int = Field(description="how many the listing gave")
    results: list[RepoResult]
    pull_requests: int = Field(description="opened or updated in this run")
    waited_s: float = Field(default=0.0, description="time spent waiting for GitHub's rate limit")
    stopped: str | None = Field(default=None, description="why the sweep stopped before the last repository")

    @property
    def ok(self) -> bool:
        return self.stopped is None and all(r.outcome != "failed" for r in self.results)
