"""The parts of GitHub's JSON that Ferry reads (REST responses and webhook payloads); extra fields ignored."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Permission = Literal["admin", "maintain", "write", "triage", "read", "none"]
WRITE = frozenset({"admin", "maintain", "write"})
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


class _M(BaseModel):
    model_config = ConfigDict(extra="ignore")


class User(_M):
    login: str


class Repository(_M):
    full_name: str
    default_branch: str = "main"
    private: bool = False

    @property
    def owner_name(self) -> tuple[str, str]:
        owner, _, name = self.full_name.partition("/")
        for part in (owner, name):
            if not _NAME.fullmatch(part) or part in (".", ".."):
                raise ValueError(f"{self.full_name!r} is not an owner/repository name")
        return owner, name


class RepoPermissions(_M):
    admin: bool = False
    maintain: bool = False
    push: bool = False
    pull: bool = False


class OrgRepository(Repository):
    """One entry of ``GET /orgs/{org}/repos``: what the sweep decides on before it clones anything."""

    archived: bool = False
    disabled: bool = False
    fork: bool = False
    size: int = Field(default=0, description="kilobytes; 0 for a repository with no commits")
    permissions: RepoPermissions | None = Field(default=None, description="the credentials' own (None: not said)")


class Ref(_M):
    ref: str
    sha: str
    repo: Repository | None = None


class PullRequest(_M):
    number: int
    html_url: str
    state: str
    title: str
    body: str | None = None
    head: Ref
    base: Ref
    draft: bool = False
    node_id: str | None = None  # GraphQL's id (markPullRequestReadyForReview takes it)
    updated_at: datetime | None = None  # a label added moves it: the labelled event's own time


class IssueComment(_M):
    id: int
    html_url: str | None = None
    body: str
    user: User
    created_at: datetime | None = None
    updated_at: datetime | None = None


class Issue(_M):
    number: int
    title: str = ""
    pull_request: dict[str, Any] | None = None


class Installation(_M):
    id: int


class Label(_M):
    name: str


class IssueCommentEvent(_M):
    action: str
    issue: Issue
    comment: IssueComment
    repository: Repository
    sender: User
    installation: Installation | None = None


class PullRequestEvent(_M):
    action: str
    number: int
    pull_request: PullRequest
    label: Label | None = None
    repository: Repository
    sender: User
    installation: Installation | None = None


class PermissionAnswer(_M):
    permission: Permission


class CheckRun(_M):
    id: int
    html_url: str | None = None


class AccessToken(_M):
    token: str
    expires_at: str


class ReviewComment(_M):
    """A pull request review comment (``/pulls/comments``): a line of a file at a commit, in a thread whose
    first comment every reply names (``in_reply_to_id``)."""

    id: int
    body: str
    user: User
    path: str
    line: int | None = None  # the line of the file at commit_id (None: outdated, or a comment on the file)
    original_line: int | None = None
    side: str | None = None  # RIGHT: the new text; LEFT: the old
    commit_id: str
    original_commit_id: str | None = None
    in_reply_to_id: int | None = None
    pull_request_review_id: int | None = None
    diff_hunk: str = ""
    html_url: str | None = None
    created_at: datetime | None = None

    @property
    def thread_id(self) -> int:
        """The id of its thread's first comment (GitHub takes replies to that one only)."""
        return self.in_reply_to_id or self.id


class Review(_M):
    id: int
    body: str | None = None
    state: str
    user: User
    submitted_at: datetime | None = None


class ReviewCommentEvent(_M):
    action: str
    comment: ReviewComment
    pull_request: PullRequest
    repository: Repository
    sender: User
    installation: Installation | None = None


class ReviewEvent(_M):
    action: str
    review: Review
    pull_request: PullRequest
    repository: Repository
    sender: User
    installation: Installation | None = None
