"""A swept repository's migration pull request: the PR bot's own path (``ferry pr`` on the clone, the branch
pushed, the pull request opened or updated, the verdict as a check run), without a thread to answer on."""

from __future__ import annotations

import logging
import shlex
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Protocol, TypeVar

from agent.prbot.checks import check_requests
from agent.prbot.github.client import GitHubClient, GitHubError
from agent.prbot.github.config import GitHubConfig
from agent.prbot.jobs import pr_text
from agent.prbot.pr.ferry_part import marked, merged
from agent.prbot.pr.models import GitIdentity, PrRequest
from agent.prbot.sweep.models import RepoResult

logger = logging.getLogger(__name__)
T = TypeVar("T")


class Call(Protocol):
    """An API call made under the sweep's rate-limit handling (waited on, or the sweep stops)."""

    def __call__(self, fn: Callable[[], T]) -> T: ...


def migration_pr(client: GitHubClient, config: GitHubConfig, call: Call, *, owner: str, name: str,
                 clone: Path, base: str, branch: str, run_command: str, test_command: str | None,
                 push_env: dict[str, str], out_dir: Path, state_dir: Path,
                 stop: threading.Event | None = None) -> RepoResult:
    """Migrate ``clone`` (a clone of ``base``, with ``origin`` the repository) into ``branch``, push it, and
    open the pull request (a draft while the migration is partial) or update Ferry's open one."""
    from agent.prbot.pr.core import make_pr

    full_name = f"{owner}/{name}"
    author = GitIdentity.parse(config.author) if config.author else GitIdentity()
    reproduce = ["ferry", "pr", ".", "--base", base, "--branch", branch, "--run", run_command]
    result = make_pr(PrRequest(
        path=str(clone), run_command=run_command, test_command=test_command, base=base, branch=branch,
        push_remote="origin", out_dir=str(out_dir), state_dir=str(state_dir), author=author, push_env=push_env,
        reproduce=shlex.join(reproduce + (["--test", test_command] if test_command else [])),
        partial_branch=True), stop=stop)
    summary = result.summary or result.status
    if result.branch is None:
        if result.status != "migrated":
            return RepoResult(repo=full_name, outcome="not_migrated", sha=result.base_sha,
                              reason=f"the migration ended {result.status}: {summary}; no pull request")
        return RepoResult(repo=full_name, outcome="no_changes", sha=result.base_sha,
                          reason=f"migrated with no changes ({summary}); no pull request")
    draft = result.status != "migrated"
    body = marked(pr_text(result.body))
    existing = call(lambda: client.find_pull(owner, name, branch, base))
    if existing is not None:
        pr = call(lambda: client.update_pull(owner, name, existing.number, title=result.title,
                                             body=merged(existing.body, body)))
        verb = "updated"
    else:
        pr = call(lambda: client.open_pull(owner, name, head=branch, base=base, title=result.title, body=body,
                                           draft=draft))
        verb = "opened as a draft (partial)" if draft else "opened"
    if result.head:
        create, updates = check_requests(result, base, result.head)
        try:
            run = call(lambda: client.create_check_run(owner, name, create))
            for update in updates:
                call(partial(client.update_check_run, owner, name, run.id, update))
        except GitHubError as exc:  # the pull request stands without its check run
            if exc.retry_at is not None:
                raise
            logger.warning("no check run on %s@%s: %s", full_name, result.head[:12], exc)
    return RepoResult(repo=full_name, outcome="updated" if existing is not None else "opened", sha=result.base_sha,
                      pr_url=pr.html_url, reason=f"{result.status}: pull request {verb}")
