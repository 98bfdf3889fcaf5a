"""The typed request and result of ``ferry pr`` (the CLI and the service's GitHub jobs share them)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agent.errors import Status


class GitIdentity(BaseModel):
    """A git author or committer."""

    name: str = "Ferry"
    email: str = "ferry@localhost"

    @classmethod
    def parse(cls, text: str) -> GitIdentity:
        """``Name <email>``, as git writes it."""
        name, sep, rest = text.partition("<")
        if not sep or not rest.endswith(">") or not name.strip() or "@" not in rest:
            raise ValueError(f"{text!r} is not 'Name <email>'")
        return cls(name=name.strip(), email=rest[:-1].strip())


class PrRequest(BaseModel):
    """What to migrate into a branch: a directory of a clean git work tree, from ``base``."""

    path: str = Field(description="a git repository, or a directory inside one")
    run_command: str
    test_command: str | None = None
    base: str | None = Field(default=None, description="branch or commit to start from (None: HEAD)")
    branch: str | None = Field(default=None, description="the branch to make or update (None: ferry/migrate-<device>)")
    push_remote: str | None = Field(default=None, description="push the branch there (force-with-lease)")
    out_dir: str | None = Field(default=None, description="pr.md, ferry.patch, report.md, result.json (None: temp)")
    state_dir: str | None = None
    llm: bool = False
    device: str = Field(default="accelerator", description="codemod target: accelerator or tpx (as ferry migrate)")
    skip_rules: list[str] = Field(default_factory=list, description="rules left out (as ferry migrate --skip-rule)")
    python: str | None = Field(default=None, description="the runs' interpreter (None: Ferry's own)")
    env: dict[str, str] = Field(default_factory=dict, description="the user's own variables for every run")
    cwd: str | None = Field(default=None, description="where every run starts, relative to ``path``")
    author: GitIdentity = Field(default_factory=GitIdentity)
    committer: GitIdentity | None = Field(default=None, description="None: the author")
    reproduce: str | None = Field(default=None, description="the exact command pr.md gives to reproduce")
    push_env: dict[str, str] = Field(default_factory=dict, description="extra environment of git push "
                                                                       "(credentials: GIT_CONFIG_* pairs)")
    partial_branch: bool = Field(default=False, description="commit and push a ``partial`` migration's verified "
                                                            "edits too (the PR bot opens it as a draft)")


class CommitInfo(BaseModel):
    sha: str
    subject: str
    files: list[str] = Field(default_factory=list, description="the paths it changes, repository-relative")


class Finding(BaseModel):
    """A finding at a line of the repository: a scan finding no rule fixed, or a profile finding."""

    path: str = Field(description="repository-relative, POSIX")
    line: int = Field(ge=1)
    level: Literal["warning", "notice"]
    title: str
    message: str


class PrResult(BaseModel):
    """How ``ferry pr`` ended: the branch (None: not made or updated), its commits, the PR text."""

    migration_id: str
    status: Status
    summary: str | None = None
    base: str
    base_sha: str
    branch: str | None = None
    head: str | None = Field(default=None, description="the branch's commit")
    commits: list[CommitInfo] = Field(default_factory=list)
    updated: bool = Field(default=False, description="the branch existed before and was moved")
    unchanged: bool = Field(default=False, description="the branch already held this migration: not moved")
    pushed: bool = False
    title: str
    body: str = Field(description="pr.md's text, the pull request's body")
    out_dir: str
    pr_text: str = Field(description="pr.md's path")
    parity: str | None = Field(default=None, description="parity's one-line headline (None: not checked)")
    findings: list[Finding] = Field(default_factory=list, description="the scan's review findings, then the "
                                                                       "profile's, at their lines")


class PrRefused(Exception):
    """``ferry pr`` will not start (dirty tree, no git repository, unknown base...): exit 2, nothing touched."""
