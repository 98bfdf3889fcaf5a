"""The GitHub jobs: background threads that migrate what ``/ferry migrate`` (or the label) asked for.

A job checks the sender's access, comments that it started, clones the repository from the
configured remote, runs ``ferry pr`` on the clone (``agent.prbot.pr.core.make_pr``: the branch pushed
before anything else), opens the pull request (a draft while the migration is partial) or updates the
open one (made ready once it is migrated), requests the asker's review, leaves the verdict as a check
run with the findings at their lines, uploads the head's scan to code scanning where the repository
takes it, and comments the result.
Every way a job fails is commented on its thread with the reason. Git's credentials travel in its
environment (``GIT_CONFIG_*``: an ``http.extraHeader``), never in a URL, an argument or a log.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import shutil
import subprocess
import threading
from pathlib import Path

from agent.ids import id_problem, inside
from agent.migration.facade import NodeUpdate, ProgressFn, RunScheduler, cancel
from agent.prbot.checks import leave_check, quiet
from agent.prbot.github.client import GitHubClient, GitHubError
from agent.prbot.github.config import GitHubConfig
from agent.prbot.github.models import WRITE, PullRequest
from agent.prbot.github.webhook import Trigger, ferry_branch
from agent.prbot.pr.ferry_part import marked, merged
from agent.prbot.pr.gitops import SAFE, GitError, PushFailed
from agent.prbot.pr.models import GitIdentity, PrRefused, PrRequest, PrResult
from agent.prbot.store import GitHubStore, JobRow, JobState
from tools.textsafe import md_code, md_inline

logger = logging.getLogger(__name__)
BODY_LIMIT = 65000
CANCELLED = ("Ferry: this migration was cancelled on the server while it ran; nothing was pushed and no pull "
             "request was opened or changed.")


class JobFailed(Exception):
    """A job cannot go on: the message is what the thread is told."""


class JobCancelled(Exception):
    """``DELETE /v1/github/jobs/{delivery}`` asked a running job to stop; ``comment`` tells its thread how far
    it had gone."""

    def __init__(self, comment: str = "") -> None:
        super().__init__(comment)
        self.comment = comment or CANCELLED


def git_env(token: str | None) -> dict[str, str]:
    """git's credentials as configuration in the environment (no token: only no prompting)."""
    if not token:
        return {"GIT_TERMINAL_PROMPT": "0"}
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    return {"GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
            "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}"}


class GitHubJobs:
    def __init__(self, data_dir: Path, config: GitHubConfig, client: GitHubClient) -> None:
        """``data_dir``: the server's data directory (its jobs and migration state go under it)."""
        self.data_dir, self.config, self.client = data_dir, config, client
        root = data_dir / "github"
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.store = GitHubStore(root / "github.db")
        self._wake = threading.Condition()
        self._stop = False
        self._threads: list[threading.Thread] = []
        # delivery -> its stop signal and its runs, while it runs
        self._running: dict[str, tuple[threading.Event, RunScheduler]] = {}
        self._running_lock = threading.Lock()
        self._lost: set[str] = set()  # deliveries whose lease another server took: they end here unsaid
        self.store.on_stop = self._stop_here  # a shared store's heartbeat: a cancel elsewhere, a lease lost

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        again = self.store.requeue_running()
        if again:
            logger.warning("queued again %d GitHub jobs a stopped server left running", len(again))
        for row in self.store.cancelled_at_restart():
            self._say(row.trigger, "Ferry: this migration was cancelled on the server, which stopped while it ran; "
                                   "it did not finish (what it had pushed before, if anything, stays).")
        for i in range(self.config.workers):
            t = threading.Thread(target=self._loop, name=f"ferry-github-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify_all()
        for t in self._threads:
            t.join(timeout=5)
        self.client.close()
        self.store.close()

    def submit(self, trigger: Trigger) -> bool:
        """Queue a delivery's job (False: the delivery was seen before: nothing new happens)."""
        new, ahead = self.store.add(trigger)
        if not new:
            return False
        if ahead and trigger.review is None:  # a review follow-up answers in its thread only, once it runs
            self._say(trigger, f"Ferry: queued behind {ahead} other migration(s) of {trigger.full_name}; it starts "
                               "when they finish.")
        with self._wake:
            self._wake.notify_all()
        return True

    def cancel(self, delivery: str) -> JobState | None:
        """Cancel a job: a queued one at once (commented), a running one at its next step (its runs are
        stopped; its thread says so when it has). Returns the state the job was in, None when unknown."""
        was = self.store.request_cancel(delivery)
        if was == "queued":
            row = self.store.get(delivery)
            if row is not None:
                self._say(row.trigger, "Ferry: this migration was cancelled on the server before it started.")
        elif was == "running":
            with self._running_lock:
                running = self._running.get(delivery)
            if running is not None:
                signal, runs = running
                # the foreground run stops, and the job at its next step; and the background runs (all of
                # this job's scheduler) a step may be waiting for
                cancel("", runs, signal)
        return was

    def _stop_here(self, delivery: str, lost: bool) -> None:
        """Stop a job this server runs: cancelled on another server, or its lease lost (``lost``: another
        server runs it now, so this one says nothing more in its thread)."""
        with self._running_lock:
            running = self._running.get(delivery)
            if lost and running is not None:
                self._lost.add(delivery)
        if running is not None:
            logger.warning("GitHub job %s: %s; stopping it here", delivery,
                           "this server's lease on it is lost" if lost else "cancelled on another server")
            signal, runs = running
            cancel("", runs, signal)

    def _loop(self) -> None:
        while True:
            with self._wake:
                if self._stop:
                    return
            row = self.store.claim()
            if row is None:
                with self._wake:
                    if not self._stop:
                        self._wake.wait(timeout=1.0)
                continue
            try:
                self._run(row)
            except Exception:  # never lose a worker thread
                logger.exception("GitHub job %s: the worker failed", row.delivery)
            with self._wake:
                self._wake.notify_all()  # the repository is free: a job waiting for it can start

    # --- one job --------------------------------------------------------------------------------

    def _say(self, t: Trigger, body: str) -> None:
        try:
            self.client.comment(t.owner, t.repo, t.number, body)
        except GitHubError as exc:
            logger.error("could not comment on %s#%d: %s", t.full_name, t.number, exc)
        except Exception:  # a comment lost is logged, never a job's end lost with it
            logger.exception("could not comment on %s#%d", t.full_name, t.number)

    def _run(self, row: JobRow) -> None:
        """One job, start to end: whatever happens, its thread is told and its row ends (a migration's thread
        on the issue or PR; a review follow-up answers in its review thread itself)."""
        t = row.trigger
        signal = threading.Event()
        runs = RunScheduler()  # this job's background runs: stopped with it, whichever way it ends
        with self._running_lock:
            self._running[row.delivery] = (signal, runs)
        if self.store.cancel_requested(row.delivery):  # asked between the claim and now
            signal.set()
        comment: str | None
        try:
            if t.review is not None:
                state, outcome = self._follow_up(row, signal)
                comment = None
            else:
                state, comment, outcome = self._attempt(row, signal, runs)
        finally:
            runs.close()
            with self._running_lock:
                self._running.pop(row.delivery, None)
                lost = row.delivery in self._lost
                self._lost.discard(row.delivery)
        if lost:  # another server runs it again and answers: no "cancelled" from here
            logger.warning("GitHub job %s: ended here after its lease was lost; nothing said", row.delivery)
            return
        if comment is not None:
            self._say(t, comment)
        try:
            self.store.finish(row.delivery, state, outcome)
        except Exception:  # the database failed: the row stays running and is queued again at the next start
            logger.exception("GitHub job %s: could not record its end (%s)", row.delivery, state)

    def _follow_up(self, row: JobRow, stop: threading.Event) -> tuple[JobState, str]:
        """A review follow-up (``agent.prbot.review``): it answers in its review thread, not on the issue; its
        row's (state, outcome). Never raises."""
        from agent.prbot.review.follow_up import FollowUpContext, follow_up

        t = row.trigger
        ctx = FollowUpContext(client=self.client, config=self.config, work=job_dir(self.root, row.delivery),
                              git_env=lambda: git_env(self.client.git_token(t.owner, t.repo)), submit=self.submit,
                              stop=stop, state_dir=self.data_dir / "state")
        try:
            end = follow_up(t, ctx)
            failed, outcome = end.state == "failed", end.outcome
        except Exception as exc:  # a bug or GitHub refusing the gate: logged, the row ends
            logger.exception("GitHub job %s: the review follow-up failed", row.delivery)
            failed, outcome = True, f"internal: {type(exc).__name__}: {exc}"
        return ("cancelled" if stop.is_set() else "failed" if failed else "done"), outcome

    def _attempt(self, row: JobRow, signal: threading.Event, runs: RunScheduler) -> tuple[JobState, str, str]:
        """The job's (state, comment for its thread, outcome for its row); never raises."""
        t = row.trigger
        try:
            state, comment = self._migrate(t, job_dir(self.root, row.delivery), row.attempt, signal, runs)
        except JobCancelled as exc:
            return "cancelled", exc.comment, "cancelled while it ran"
        except PushFailed as exc:
            return "failed", failed_comment(t.full_name, f"the migration passed but pushing `{exc.branch}` failed "
                                            f"({exc.cause}); comment `/ferry migrate` again to retry"), str(exc)
        except GitError as exc:  # git's words without the server's paths
            return "failed", failed_comment(t.full_name, exc.public), str(exc)
        except (JobFailed, PrRefused) as exc:
            return "failed", failed_comment(t.full_name, str(exc)), str(exc)
        except GitHubError as exc:
            return "failed", failed_comment(t.full_name, f"GitHub answered {exc}"), str(exc)
        except Exception as exc:  # a bug: still told on the thread, never dropped
            logger.exception("GitHub job %s failed", row.delivery)
            return "failed", (f"Ferry failed on {t.full_name} with an internal error ({type(exc).__name__}); "
                              "the server's log has the details."), f"internal: {type(exc).__name__}: {exc}"
        return state, comment, comment

    def _migrate(self, t: Trigger, job_dir: Path, attempt: int, signal: threading.Event,
                 runs: RunScheduler) -> tuple[JobState, str]:
        def stop_if_asked(_node: str = "", _update: NodeUpdate | None = None) -> None:
            if signal.is_set():
                raise JobCancelled

        stop_if_asked()  # cancelled between its claim and now: not even the "started" comment
        if t.error:
            raise JobFailed(t.error)
        permission = self.client.permission(t.owner, t.repo, t.sender)
        if permission not in WRITE:
            raise JobFailed(f"@{t.sender} has {permission} access; `/ferry migrate` needs write access")
        if not t.run_command:
            raise JobFailed('no run command: comment `/ferry migrate --run "python train.py"` (or configure '
                            "FERRY_GITHUB_RUN for the label)")
        repo = self.client.repository(t.owner, t.repo)
        base = t.base
        if t.is_pull:
            pull = self.client.pull(t.owner, t.repo, t.number)
            if pull.head.repo is None or pull.head.repo.full_name != repo.full_name:
                raise JobFailed("the pull request's branch is in a fork; Ferry migrates branches of this repository")
            base = pull.head.ref
        base = base or repo.default_branch
        branch = ferry_branch(base, repo.default_branch)
        tests = f", tests: {md_code(t.test_command)}" if t.test_command else ""
        again = f" Attempt {attempt}: the server stopped during the one before." if attempt > 1 else ""
        self._say(t, f"Ferry started migrating {md_code(base)} of {t.full_name} into {md_code(branch)} "
                     f"(run: {md_code(t.run_command)}{tests}).{again}")
        env = git_env(self.client.git_token(t.owner, t.repo))
        shutil.rmtree(job_dir, ignore_errors=True)
        job_dir.mkdir(parents=True)
        clone = job_dir / "repo"
        url = self.config.clone_url.format(owner=t.owner, repo=t.repo)
        proc = subprocess.run(["git", *SAFE, "clone", "-q", "--no-tags", "--branch", base, "--", url, str(clone)],
                              capture_output=True, text=True, env={**_base_env(), **env}, timeout=900)
        stop_if_asked()
        if proc.returncode != 0:
            raise JobFailed(f"cloning {t.full_name} failed: {proc.stderr.strip()[-500:]}")
        author = GitIdentity.parse(self.config.author) if self.config.author else GitIdentity()
        result = self._make_pr(PrRequest(
            path=str(clone), run_command=t.run_command, test_command=t.test_command, base=base, branch=branch,
            push_remote="origin", out_dir=str(job_dir / "out"), state_dir=str(self.data_dir / "state"),
            author=author, push_env=env, reproduce=_reproduce(base, branch, t), partial_branch=True),
            stop_if_asked, runs, signal)
        draft = result.status != "migrated" and result.branch is not None  # partial: its verified edits, a draft
        if result.branch is None:
            # nothing pushed: the verdict goes on the pull request's own head (an issue's base commit is left alone)
            check = self._check(t, result, base, result.base_sha) if t.is_pull else ""
            if result.status != "migrated":
                return "failed", not_migrated_comment(base, result) + check
            return "done", (f"Ferry: {md_code(base)} needs no changes "
                            f"({md_inline(result.summary or 'migrated', keep_code=True)}); no pull request.{check}")
        if signal.is_set():  # cancelled after the migration's last step, while the branch was being pushed
            raise JobCancelled(f"Ferry: this migration was cancelled on the server after its branch "
                               f"{md_code(result.branch)} was pushed; no pull request was opened or "
                               "changed.")
        body = marked(pr_text(result.body))  # Ferry's part: a person's text around it is kept by updates
        existing = self.client.find_pull(t.owner, t.repo, result.branch, base)
        if existing is not None:
            pr = self.client.update_pull(t.owner, t.repo, existing.number, title=result.title,
                                         body=merged(existing.body, body))
            verb = "updated"
            if existing.draft and not draft:
                verb += self._mark_ready(t, existing)
        else:
            pr = self.client.open_pull(t.owner, t.repo, head=result.branch, base=base, title=result.title, body=body,
                                       draft=draft)
            verb = "opened as a draft (the migration is partial)" if draft else "opened"
        self._request_review(t, pr.number)
        check = self._check(t, result, base, result.head) if result.head else ""
        self._upload_sarif(t, clone, result)
        moved = "unchanged" if result.unchanged else "pushed"
        return "done", (f"Ferry migrated {md_code(base)}: **{result.status}**. Branch {md_code(result.branch)} "
                        f"{moved}; pull request {verb}: {pr.html_url}{check}")

    def _mark_ready(self, t: Trigger, pull: PullRequest) -> str:
        """A draft Ferry opened for a partial migration, made ready now that the migration passes."""
        try:
            self.client.mark_ready(t.owner, t.repo, pull)
        except GitHubError as exc:
            logger.warning("could not mark %s#%d ready for review: %s", t.full_name, pull.number, exc)
            return " (it stays a draft: GitHub refused to mark it ready for review)"
        return " and marked ready for review"

    def _request_review(self, t: Trigger, number: int) -> None:
        """The user who asked for the migration reviews it (a refusal is logged: the pull request stands)."""
        try:
            self.client.request_reviewers(t.owner, t.repo, number, [t.sender])
        except GitHubError as exc:
            logger.warning("could not request a review of %s#%d from %s: %s", t.full_name, number, t.sender, exc)

    def _check(self, t: Trigger, result: PrResult, base: str, head_sha: str) -> str:
        """The verdict as a check run on ``head_sha`` (``agent.prbot.checks.leave_check``)."""
        return leave_check(self.client, t.owner, t.repo, result, base, head_sha)

    def _upload_sarif(self, t: Trigger, clone: Path, result: PrResult) -> None:
        """The scan of the pushed head as SARIF to code scanning, where the repository takes it: a refusal
        (code scanning off, no permission: 403/404) or any error is logged and fails nothing."""
        if not result.head or not result.branch:
            return
        try:
            sarif = head_sarif(clone, result.head)
            self.client.upload_sarif(t.owner, t.repo, commit_sha=result.head, ref=f"refs/heads/{result.branch}",
                                     sarif=sarif)
        except GitHubError as exc:
            logger.info("code scanning took no SARIF for %s: %s", t.full_name, exc)
        except Exception:  # the scan of the head failed: the pull request and its check run stand
            logger.exception("no SARIF for %s", t.full_name)

    def _make_pr(self, req: PrRequest, progress: ProgressFn, runs: RunScheduler,
                 stop: threading.Event | None = None) -> PrResult:
        from agent.prbot.pr.core import make_pr

        # progress raises JobCancelled between steps: nothing pushed
        return make_pr(req, progress=progress, runs=runs, stop=stop)


def failed_comment(full_name: str, detail: str) -> str:
    """Why a job failed, for its thread: the detail (git's or GitHub's words among Ferry's) renders as
    written, its backtick-quoted names as code, and cannot add links, images, HTML, headings or mentions."""
    return f"Ferry could not migrate {full_name}: {quiet(md_inline(detail, keep_code=True))}"


def not_migrated_comment(base: str, result: PrResult) -> str:
    """A migration that did not end ``migrated``: its status and summary (escaped), and no PR."""
    return (f"Ferry's migration of {md_code(base)} ended **{md_inline(result.status)}**: "
            f"{quiet(md_inline(result.summary or '', keep_code=True))}\n\nNo pull request was opened.")


def pr_text(body: str, limit: int = BODY_LIMIT) -> str:
    """pr.md as the pull request's body: GitHub refuses one over 65536 characters, so a longer one is cut
    at a line, saying so."""
    if len(body) <= limit:
        return body
    cut = body.rfind("\n", 0, limit - 200)
    return body[: cut if cut > 0 else limit - 200] + "\n\n(cut here: GitHub takes 65536 characters; the whole " \
        "text is pr.md in the job's outputs on the Ferry server)\n"


def job_dir(root: Path, delivery: str) -> Path:
    """``<github dir>/jobs/<delivery>``: the delivery id when it is a plain name (the webhook accepts no other),
    a digest of it for a row an older server accepted; never outside ``jobs/``."""
    name = delivery if id_problem(delivery) is None else "d-" + hashlib.sha256(delivery.encode()).hexdigest()[:40]
    return inside(root / "jobs", name, what="delivery id")


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "FERRY_GITHUB_"))}


def _reproduce(base: str, branch: str, t: Trigger) -> str:
    import shlex

    parts = ["ferry", "pr", ".", "--base", base, "--branch", branch, "--run", t.run_command or ""]
    if t.test_command:
        parts += ["--test", t.test_command]
    return shlex.join(parts)


def head_sarif(clone: Path, head: str) -> bytes:
    """``ferry scan --sarif`` of the job's clone with ``head`` checked out (the clone is the job's own)."""
    import json

    from tools.scan.api import scan
    from tools.scan.models import ScanRequest
    from tools.scan.sarif import to_sarif

    subprocess.run(["git", *SAFE, "-C", str(clone), "checkout", "-q", "--detach", head], check=True,
                   capture_output=True, env={**_base_env(), "GIT_TERMINAL_PROMPT": "0"}, timeout=300)
    return json.dumps(to_sarif(scan(ScanRequest(path=clone)))).encode()
