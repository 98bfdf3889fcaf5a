"""One sweep of an organisation: list its repositories, skip those Ferry cannot or need not migrate (saying
why), scan the others' default branch from a shallow clone (the scan reads files and runs nothing), and
open a migration pull request for each with CUDA findings, through the PR bot's own path.

GitHub's rate limit is respected: a refused request (403/429 naming the reset, or ``Retry-After``) is
waited on when the wait is at most ``max_wait_s``, and so is a window about to run out (fewer than
``reserve`` requests left); a longer wait stops the sweep, saying until when. At most ``max_prs`` pull
requests a run, ``delay_s`` apart. A repository with Ferry's pull request open, or already swept at its
default branch's commit (the outcome recorded in the bot's store), is not done again.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from agent.prbot.github.client import GitHubClient, GitHubError
from agent.prbot.github.config import GitHubConfig
from agent.prbot.github.models import OrgRepository
from agent.prbot.github.webhook import ferry_branch
from agent.prbot.jobs import git_env
from agent.prbot.pr.gitops import SAFE, GitError, PushFailed
from agent.prbot.pr.models import PrRefused
from agent.prbot.sweep.models import RECORDED, RepoResult, SweepOptions, SweepReport
from agent.prbot.sweep.pull import migration_pr
from agent.prbot.sweep.store import SweepStore

logger = logging.getLogger(__name__)
T = TypeVar("T")
ORG_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})")
_SHA = re.compile(r"[0-9a-f]{40}")


class SweepStopped(Exception):
    """The sweep cannot go on (GitHub's rate limit for longer than it may wait): the message says until when."""


def listing_skip(repo: OrgRepository, max_size_mb: float | None = None) -> str | None:
    """Why the listing alone rules a repository out (None: it is looked at)."""
    if repo.archived:
        return "archived (read-only: no branch can be pushed)"
    if repo.disabled:
        return "disabled on GitHub"
    if repo.fork:
        return "a fork (its parent is migrated, not each fork)"
    if repo.size == 0:
        return "empty (no commits)"
    if max_size_mb is not None and repo.size > max_size_mb * 1024:
        return (f"{repo.size / 1024:.0f} MB on GitHub, larger than the sweep's --max-size of {max_size_mb:g} MB "
                "(not cloned)")
    p = repo.permissions
    if p is not None and not (p.push or p.maintain or p.admin):
        return "no push access for Ferry's credentials"
    return None


def _utc(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "FERRY_GITHUB_"))}


class Sweeper:
    def __init__(self, client: GitHubClient, config: GitHubConfig, data_dir: Path, options: SweepOptions, *,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time) -> None:
        """``data_dir``: the bot's data directory (``ferry serve --data-dir``): its ``github/github.db`` keeps
        what was swept, its ``state`` the migrations' checkpoints."""
        self.client, self.config, self.data_dir, self.options = client, config, data_dir, options
        self.sleep, self.clock = sleep, clock
        self.root = data_dir / "github"
        self.root.mkdir(parents=True, exist_ok=True)
        self.waited = 0.0
        self.prs = 0  # migrations tried in this run (the cap counts them)

    # --- GitHub's rate limit ----------------------------------------------------------------------

    def _wait_until(self, when: float, why: str) -> None:
        wait = max(0.0, when - self.clock())
        if wait > self.options.max_wait_s:
            raise SweepStopped(f"{why} until {_utc(when)} (in {wait:.0f} s, longer than the --max-wait of "
                               f"{self.options.max_wait_s:.0f} s); run the sweep again after then: what it did "
                               "is recorded and is not done again")
        logger.warning("%s: waiting %.0f s (until %s)", why, wait, _utc(when))
        self.sleep(wait + 1.0)  # GitHub's reset is whole seconds: one more, not one too few
        self.waited += wait + 1.0

    def call(self, fn: Callable[[], T]) -> T:
        """An API call; refused for the rate limit, waited on (then made again) or the sweep stopped."""
        for _ in range(3):
            try:
                return fn()
            except GitHubError as exc:
                if exc.retry_at is None:
                    raise
                self._wait_until(exc.retry_at, f"GitHub's rate limit ({exc})")
        return fn()

    def _keep_reserve(self) -> None:
        rate = self.client.rate
        if rate is not None and rate.remaining < self.options.reserve and rate.reset > self.clock():
            self._wait_until(rate.reset, f"GitHub's rate limit: {rate.remaining} requests left")

    # --- the sweep --------------------------------------------------------------------------------

    def sweep(self, org: str) -> SweepReport:
        if not ORG_NAME.fullmatch(org):
            raise ValueError(f"{org!r} is not an organisation's name (letters, digits and '-', at most 39)")
        try:
            repos = self.call(lambda: self.client.org_repos(org))
        except SweepStopped as exc:
            return SweepReport(org=org, repositories=0, results=[], pull_requests=0, waited_s=self.waited,
                               stopped=f"no repository listed: {exc}")
        store = SweepStore(self.root / "github.db")
        results: list[RepoResult] = []
        stopped: str | None = None
        try:
            for repo in repos:
                why = listing_skip(repo, self.options.max_size_mb)
                if why is not None:
                    results.append(RepoResult(repo=repo.full_name, outcome="skipped", reason=why))
                    continue
                if stopped is not None:
                    results.append(RepoResult(repo=repo.full_name, outcome="not_reached",
                                              reason="the sweep stopped before it"))
                    continue
                try:
                    self._keep_reserve()
                    result = self._one(repo, store)
                except SweepStopped as exc:
                    stopped = f"stopped at {repo.full_name}: {exc}"
                    results.append(RepoResult(repo=repo.full_name, outcome="not_reached", reason=str(exc)))
                    continue
                if result.outcome in RECORDED and result.sha and not self.options.dry_run:
                    store.record(result.repo, result.sha, result.outcome, result.reason, result.pr_url)
                results.append(result)
        finally:
            store.close()
        made = sum(r.outcome in ("opened", "updated") for r in results)
        return SweepReport(org=org, repositories=len(repos), results=results, pull_requests=made,
                           waited_s=round(self.waited, 1), stopped=stopped)

    def _one(self, repo: OrgRepository, store: SweepStore) -> RepoResult:
        """One repository's result; raises only SweepStopped."""
        name = repo.full_name
        try:
            return self._look(repo, store)
        except SweepStopped:
            raise
        except PushFailed as exc:
            return RepoResult(repo=name, outcome="failed", reason=f"pushing {exc.branch} failed: {exc.cause}")
        except GitError as exc:
            return RepoResult(repo=name, outcome="failed", reason=exc.public)
        except (PrRefused, ValueError) as exc:
            return RepoResult(repo=name, outcome="failed", reason=str(exc))
        except GitHubError as exc:
            return RepoResult(repo=name, outcome="failed", reason=f"GitHub answered {exc}")
        except subprocess.TimeoutExpired:
            return RepoResult(repo=name, outcome="failed", reason="git timed out")
        except Exception as exc:  # a bug: said in the table, the sweep goes on
            logger.exception("sweeping %s failed", name)
            return RepoResult(repo=name, outcome="failed", reason=f"internal error ({type(exc).__name__})")

    def _git(self, args: list[str], env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *SAFE, *args], capture_output=True, text=True, env={**_base_env(), **env},
                              timeout=timeout)

    def _look(self, repo: OrgRepository, store: SweepStore) -> RepoResult:
        owner, name = repo.owner_name
        full, base = repo.full_name, repo.default_branch
        env = git_env(self.call(lambda: self.client.git_token(owner, name)))
        url = self.config.clone_url.format(owner=owner, repo=name)
        listed = self._git(["ls-remote", "--", url, f"refs/heads/{base}"], env, timeout=120)
        if listed.returncode != 0:
            return RepoResult(repo=full, outcome="failed",
                              reason=f"git ls-remote failed: {listed.stderr.strip()[-300:]}")
        sha = listed.stdout.split("\t", 1)[0].strip()
        if not _SHA.fullmatch(sha):
            return RepoResult(repo=full, outcome="skipped", reason=f"empty (no branch {base})")
        seen = store.get(full)
        if seen is not None and seen.sha == sha:
            return RepoResult(repo=full, outcome="skipped", sha=sha, pr_url=seen.pr_url,
                              reason=f"already swept at {sha[:12]} ({seen.outcome}: {seen.reason})")
        branch = ferry_branch(base, base)
        open_pr = self.call(lambda: self.client.find_pull(owner, name, branch))
        if open_pr is not None:
            return RepoResult(repo=full, outcome="skipped", sha=sha, pr_url=open_pr.html_url,
                              reason=f"Ferry's pull request #{open_pr.number} is open")
        work = Path(tempfile.mkdtemp(prefix="sweep-", dir=self.root))
        try:
            clone = work / "repo"
            cloned = self._git(["clone", "-q", "--depth", "1", "--single-branch", "--no-tags", "--branch", base,
                                "--", url, str(clone)], {**env, "GIT_LFS_SKIP_SMUDGE": "1"})
            if cloned.returncode != 0:
                return RepoResult(repo=full, outcome="failed", sha=sha,
                                  reason=f"cloning failed: {cloned.stderr.strip()[-300:]}")
            findings = scan_count(clone)
            if findings == 0:
                return RepoResult(repo=full, outcome="clean", sha=sha, findings=0, reason="no CUDA findings")
            found = f"{findings} CUDA finding(s)"
            if self.options.dry_run:
                return RepoResult(repo=full, outcome="would_open", sha=sha, findings=findings,
                                  reason=f"{found}: a pull request would be opened (--dry-run)")
            if self.prs >= self.options.max_prs:
                return RepoResult(repo=full, outcome="skipped", sha=sha, findings=findings,
                                  reason=f"{found}; this run's cap of {self.options.max_prs} pull request(s) is "
                                         "reached: the next sweep takes it")
            if self.prs and self.options.delay_s:
                self.sleep(self.options.delay_s)
            self.prs += 1  # counted when tried: a failed attempt is paced and capped as well
            result = migration_pr(self.client, self.config, self.call, owner=owner, name=name, clone=clone,
                                  base=base, branch=branch, run_command=self.options.run_command,
                                  test_command=self.options.test_command, push_env=env, out_dir=work / "out",
                                  state_dir=self.data_dir / "state")
            if result.sha != sha:  # the clone's own commit is what was migrated
                logger.info("%s moved from %s to %s during the sweep", full, sha[:12], (result.sha or "")[:12])
            return result.model_copy(update={"findings": findings,
                                             "reason": f"{found}; {result.reason}"})
        finally:
            shutil.rmtree(work, ignore_errors=True)


def scan_count(clone: Path) -> int:
    """How many CUDA findings the scan makes in ``clone`` (it reads the files; nothing of theirs runs)."""
    from tools.scan.api import scan
    from tools.scan.models import ScanRequest

    return len(scan(ScanRequest(path=clone, jobs=1)).findings)
