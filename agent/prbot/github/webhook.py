"""The webhook's checks: the signature, the ``/ferry migrate`` command, and what a delivery asks for.

Pure functions: the route verifies and parses, the jobs act. A delivery is turned into a
:class:`Trigger` (what to migrate, for whom, on which thread) or an :class:`Ignored` with the reason.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import shlex
import time
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from agent.prbot.github.config import GitHubConfig
from agent.prbot.github.models import (
    IssueCommentEvent,
    PullRequest,
    PullRequestEvent,
    Repository,
    ReviewCommentEvent,
    ReviewEvent,
)

COMMAND = "/ferry migrate"
PREFIX = "/ferry"
FERRY_BRANCHES = "ferry/migrate-"  # ferry_branch()'s names: a pull request from one is Ferry's
_BRANCH_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
FUTURE_SKEW_S = 300  # an event stamped this far ahead of the server's clock is still taken (clock skew)


class CommandError(ValueError):
    """A ``/ferry migrate`` comment that cannot be read: the bot comments the message back."""


class MigrateCommand(BaseModel):
    run: str | None = None
    test: str | None = None


class ReviewAsk(BaseModel):
    """A review follow-up on a Ferry pull request: one comment of a review thread (``comment_id``), or a
    submitted review whose comments the job reads (``comment_id`` None)."""

    branch: str = Field(description="the pull request's head branch (Ferry's)")
    base: str = Field(description="the branch it merges into")
    review_id: int | None = None
    comment_id: int | None = None
    thread_id: int | None = Field(default=None, description="the thread's first comment (replies go to it)")
    path: str | None = None
    line: int | None = Field(default=None, description="the commented line of the file at commit_id")
    side: str = "RIGHT"
    commit_id: str | None = None
    body: str = ""
    review_state: str | None = Field(default=None, description="a submitted review's state (changes_requested...)")


class Trigger(BaseModel):
    """What one delivery asks for: migrate ``base`` of owner/repo, answering on thread ``number``."""

    delivery: str
    event: str
    owner: str
    repo: str
    number: int
    is_pull: bool
    base: str | None = None  # the branch to migrate (None: the default branch, or the PR's head, read in the job)
    run_command: str | None = None
    test_command: str | None = None
    sender: str
    installation: int | None = None
    error: str | None = None  # a command that could not be read: comment this, migrate nothing
    payload_key: str | None = None  # what the signature covers (payload_key()): one job per signed event
    review: ReviewAsk | None = None  # a review follow-up (agent.prbot.review), not a migration

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.repo}"


class Ignored(BaseModel):
    reason: str


def verify_signature(secret: bytes, body: bytes, header: str | None) -> bool:
    """``X-Hub-Signature-256: sha256=<hex>``: the HMAC-SHA256 of the raw body, compared in constant time."""
    if not header or not header.startswith("sha256="):
        return False
    expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.strip().encode())


def payload_key(event: str, body: bytes) -> str:
    """The replay key of a delivery: the SHA-256 of its event name and its exact signed body. A new
    ``X-GitHub-Delivery`` (unsigned) on the same body is the same key; GitHub's own redelivery (the
    same delivery and body) too; a genuinely new event (a new comment, a label added again) has a new
    body (its own ids and timestamps) and so a new key."""
    return hashlib.sha256(event.encode() + b"\0" + body).hexdigest()


def stale(what: str, when: datetime | None, max_age_s: float, now: float | None = None) -> Ignored | None:
    """An Ignored when the event's own time (``when``, signed with the body) is missing, older than
    ``max_age_s`` or far in the future; None when it is recent."""
    if when is None:
        return Ignored(reason=f"ignored: stale: the event carries no {what}, so its age cannot be told")
    stamp = (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()
    age = (time.time() if now is None else now) - stamp
    if age > max_age_s:
        return Ignored(reason=f"ignored: stale: its {what} is {int(age)} s old, more than the {int(max_age_s)} s "
                              "Ferry acts on (FERRY_GITHUB_MAX_EVENT_AGE); comment the command again")
    if age < -FUTURE_SKEW_S:
        return Ignored(reason=f"ignored: stale: its {what} is {int(-age)} s ahead of this server's clock")
    return None


def parse_command(text: str) -> MigrateCommand | None:
    """The command of a comment whose first non-empty line is ``/ferry migrate [--run CMD] [--test CMD]``
    (None: the comment is not a command). CommandError: it is one, but cannot be read."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if first != COMMAND and not first.startswith(COMMAND + " "):
        return None
    try:
        words = shlex.split(first[len(COMMAND):])
    except ValueError as exc:
        raise CommandError(f"the command's quoting is broken ({exc}); write e.g. "
                           '`/ferry migrate --run "python train.py" --test "python -m pytest -q"`') from None
    found: dict[str, str] = {}
    while words:
        flag = words.pop(0)
        name, eq, value = flag.partition("=")
        if name == "--env":
            # The bot's runs take no variables from a comment anyone with access can write: a loader or
            # interpreter variable (LD_PRELOAD...) there is what issue 34 ran code on the host with.
            raise CommandError("`--env` is refused: the bot takes no environment variables from a comment. Set a "
                               "variable your program needs in the run command itself, e.g. "
                               '`/ferry migrate --run "DATA_DIR=data python train.py"`, where it reaches only the '
                               "sandboxed program (loader and interpreter variables such as LD_PRELOAD or "
                               "PYTHONSTARTUP are never accepted as options; see docs/sandbox.md)")
        if name not in ("--run", "--test"):
            raise CommandError(f"unknown option {flag!r}; `/ferry migrate` takes `--run \"CMD\"` and `--test \"CMD\"`")
        if not eq:
            if not words:
                raise CommandError(f"{name} needs a command after it, e.g. {name} \"python train.py\"")
            value = words.pop(0)
        if not value.strip():
            raise CommandError(f"{name} is empty")
        found[name[2:]] = value
    return MigrateCommand(**found)


def ferry_branch(base: str, default_branch: str) -> str:
    """``ferry/migrate-tpx`` for the default branch; ``ferry/migrate-tpx-for-<base>`` for another."""
    if base == default_branch:
        return "ferry/migrate-tpx"
    return "ferry/migrate-tpx-for-" + (_BRANCH_SAFE.sub("-", base).strip("-.") or "branch")[:80]


def trigger_of(event: str, delivery: str, payload: dict[str, Any], config: GitHubConfig,
               now: float | None = None) -> Trigger | Ignored:
    """What a verified delivery asks for (``now``: the server's clock, for the event's age)."""
    try:
        if event == "issue_comment":
            return _comment(IssueCommentEvent.model_validate(payload), delivery, config, now)
        if event == "pull_request":
            return _labelled(PullRequestEvent.model_validate(payload), delivery, config, now)
        if event == "pull_request_review_comment":
            return _review_comment(ReviewCommentEvent.model_validate(payload), delivery, config, now)
        if event == "pull_request_review":
            return _review(ReviewEvent.model_validate(payload), delivery, config, now)
    except ValidationError as exc:
        return Ignored(reason=f"the {event} payload is not one Ferry reads: {exc.errors()[0]['msg']}")
    except ValueError as exc:  # a repository name that is not owner/name
        return Ignored(reason=str(exc))
    return Ignored(reason=f"event {event!r} is not one Ferry acts on (issue_comment, pull_request, "
                          "pull_request_review_comment, pull_request_review)")


def _comment(ev: IssueCommentEvent, delivery: str, config: GitHubConfig, now: float | None) -> Trigger | Ignored:
    if ev.action != "created":
        return Ignored(reason=f"comment {ev.action}, not created")
    if config.bot_login and ev.comment.user.login == config.bot_login:
        return Ignored(reason="the bot's own comment")
    owner, repo = ev.repository.owner_name
    base = dict(delivery=delivery, event="issue_comment", owner=owner, repo=repo, number=ev.issue.number,
                is_pull=ev.issue.pull_request is not None, sender=ev.sender.login,
                installation=ev.installation.id if ev.installation else None)
    too_old = stale("comment.created_at", ev.comment.created_at, config.max_event_age_s, now)
    if too_old is not None:
        return too_old
    try:
        command = parse_command(ev.comment.body)
    except CommandError as exc:
        return Trigger(**base, error=str(exc))  # type: ignore[arg-type]
    if command is None:
        return Ignored(reason="not a /ferry migrate comment")
    return Trigger(**base, run_command=command.run or config.run_command,  # type: ignore[arg-type]
                   test_command=command.test or config.test_command)


def _labelled(ev: PullRequestEvent, delivery: str, config: GitHubConfig, now: float | None) -> Trigger | Ignored:
    if ev.action != "labeled" or ev.label is None or ev.label.name != config.label:
        return Ignored(reason=f"pull request {ev.action}, not labelled {config.label!r}")
    too_old = stale("pull_request.updated_at", ev.pull_request.updated_at, config.max_event_age_s, now)
    if too_old is not None:
        return too_old
    owner, repo = ev.repository.owner_name
    return Trigger(delivery=delivery, event="pull_request", owner=owner, repo=repo, number=ev.number, is_pull=True,
                   base=ev.pull_request.head.ref, sender=ev.sender.login,
                   installation=ev.installation.id if ev.installation else None,
                   run_command=config.run_command, test_command=config.test_command)


def review_key(full_name: str, what: str, number: int) -> str:
    """The replay key of a review follow-up: one job per review comment (``what`` "comment") or review,
    whichever delivery brings it (its own event, a redelivery, or the review that holds it)."""
    return hashlib.sha256(f"review-{what}\0{full_name}\0{number}".encode()).hexdigest()


def _ferry_pull(pull: PullRequest, repo: Repository) -> Ignored | None:
    head_repo = pull.head.repo.full_name if pull.head.repo is not None else None
    if not pull.head.ref.startswith(FERRY_BRANCHES) or head_repo != repo.full_name:
        return Ignored(reason="not a Ferry pull request (its branch is not ferry/migrate-* of this repository)")
    if pull.state != "open":
        return Ignored(reason=f"the pull request is {pull.state}")
    return None


def _review_comment(ev: ReviewCommentEvent, delivery: str, config: GitHubConfig,
                    now: float | None) -> Trigger | Ignored:
    c = ev.comment
    if ev.action != "created":
        return Ignored(reason=f"review comment {ev.action}, not created")
    if config.bot_login and c.user.login == config.bot_login:
        return Ignored(reason="the bot's own comment")
    not_ours = _ferry_pull(ev.pull_request, ev.repository)
    if not_ours is not None:
        return not_ours
    too_old = stale("comment.created_at", c.created_at, config.max_event_age_s, now)
    if too_old is not None:
        return too_old
    line = c.line if c.line is not None else c.original_line
    if line is None and not c.body.lstrip().startswith(PREFIX):
        return Ignored(reason="a comment on a whole file, not on a line")
    owner, repo = ev.repository.owner_name
    ask = ReviewAsk(branch=ev.pull_request.head.ref, base=ev.pull_request.base.ref,
                    review_id=c.pull_request_review_id, comment_id=c.id, thread_id=c.thread_id, path=c.path,
                    line=line, side=c.side or "RIGHT",
                    commit_id=c.commit_id if c.line is not None else (c.original_commit_id or c.commit_id),
                    body=c.body)
    return Trigger(delivery=delivery, event="pull_request_review_comment", owner=owner, repo=repo,
                   number=ev.pull_request.number, is_pull=True, base=ask.branch, sender=ev.sender.login,
                   installation=ev.installation.id if ev.installation else None, run_command=config.run_command,
                   test_command=config.test_command, review=ask,
                   payload_key=review_key(ev.repository.full_name, "comment", c.id))


def _review(ev: ReviewEvent, delivery: str, config: GitHubConfig, now: float | None) -> Trigger | Ignored:
    if ev.action != "submitted":
        return Ignored(reason=f"review {ev.action}, not submitted")
    if config.bot_login and ev.review.user.login == config.bot_login:
        return Ignored(reason="the bot's own review")
    not_ours = _ferry_pull(ev.pull_request, ev.repository)
    if not_ours is not None:
        return not_ours
    too_old = stale("review.submitted_at", ev.review.submitted_at, config.max_event_age_s, now)
    if too_old is not None:
        return too_old
    owner, repo = ev.repository.owner_name
    ask = ReviewAsk(branch=ev.pull_request.head.ref, base=ev.pull_request.base.ref, review_id=ev.review.id,
                    body=ev.review.body or "", review_state=ev.review.state)
    return Trigger(delivery=delivery, event="pull_request_review", owner=owner, repo=repo,
                   number=ev.pull_request.number, is_pull=True, base=ask.branch, sender=ev.sender.login,
                   installation=ev.installation.id if ev.installation else None, run_command=config.run_command,
                   test_command=config.test_command, review=ask,
                   payload_key=review_key(ev.repository.full_name, "review", ev.review.id))
