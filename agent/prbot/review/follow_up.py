"""A review follow-up job: a comment in a review thread of a Ferry pull request, acted on.

Who may command: a user with write access (the permission the ``/ferry migrate`` gate asks GitHub);
anyone else's comment does nothing at all (no reply: a public pull request's passers-by are not
answered). What starts one: a ``/ferry ...`` command in the thread, or any comment on a line Ferry
wrote (``git blame`` names Ferry's identity). The comment is read by the chat (``answer``); a revert
or skip of the rule that changed the line undoes that change at that line only
(``site.undo_at``), as a NEW commit on the branch's current head, so a person's commit pushed there
before is kept and built on; the push is a fast-forward (never forced: a branch that moved meanwhile
refuses it). The commit is verified (the run command, then the test command, on tpx in the sandbox),
pushed, the thread told what changed and what was verified, and resolved when the change answers it
(committed, and its runs passed). Each commit carries ``Ferry-Review-Comment: <id>``: a job repeated
after a restart finds its commit there and does not make a second one. A new run or test command,
or a retry, runs ``ferry pr`` from the branch's current head (its commits on top, the same
fast-forward), leaving out the rules this branch's reviews reverted.
"""

from __future__ import annotations

import logging
import re
import shlex
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from agent.chat import intents
from agent.prbot.checks import leave_check
from agent.prbot.github.client import GitHubClient, GitHubError
from agent.prbot.github.config import GitHubConfig
from agent.prbot.github.models import WRITE, ReviewComment
from agent.prbot.github.webhook import COMMAND, CommandError, Trigger, parse_command, review_key
from agent.prbot.pr import gitops
from agent.prbot.pr.ferry_part import with_attempt
from agent.prbot.pr.models import GitIdentity, PrRefused, PrRequest, PrResult
from agent.prbot.review.answer import facts_of, instruction, understand
from agent.prbot.review.check import revert_result
from agent.prbot.review.site import FerrySite, ferry_site, undo_at
from tools.textsafe import md_code, md_inline

logger = logging.getLogger(__name__)
_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")  # a SHA-1 or SHA-256 object name
TRAILER = "Ferry-Review-Comment"
MARK = "ferry-review-reply:"
RUN_TIMEOUT_S = 900.0


@dataclass
class FollowUpContext:
    """What a follow-up job is given by the GitHub jobs (``agent.prbot.jobs``)."""

    client: GitHubClient
    config: GitHubConfig
    work: Path  # the job's own directory (emptied first)
    git_env: Callable[[], dict[str, str]]  # git's credentials, asked once the sender may command
    submit: Callable[[Trigger], bool]  # queue another job (a review's comments, one job each)
    stop: threading.Event
    state_dir: Path | None = None  # the migrations' state (a new attempt's); None: the default


class FollowUpEnd(BaseModel):
    """How a follow-up ended: its row's state and outcome (what the thread was told, or why nothing)."""

    state: str
    outcome: str


class Verified(BaseModel):
    command: str
    ok: bool
    detail: str


def follow_up(t: Trigger, ctx: FollowUpContext) -> FollowUpEnd:
    """One review follow-up, start to end; a failure after the gate is replied in the thread."""
    ask = t.review
    assert ask is not None
    if ask.comment_id is None:
        return _expand(t, ctx)
    permission = ctx.client.permission(t.owner, t.repo, t.sender)
    if permission not in WRITE:
        logger.info("review comment %s on %s#%d by %s (%s access): ignored", ask.comment_id, t.full_name, t.number,
                    t.sender, permission)
        return FollowUpEnd(state="done", outcome=f"ignored: @{t.sender} has {permission} access")
    before = _replied_before(t, ctx)
    if before is not None:  # a job repeated after a restart: the thread has its answer already
        if before:
            _resolve(t, ctx)
        return FollowUpEnd(state="done", outcome="answered before: the thread holds Ferry's reply to this comment "
                                                  "(a job repeated after a restart); no second reply")
    said, resolve, failed = _act_safely(t, ctx)
    if failed is not None:
        _reply(t, ctx, said or "", False)
        return FollowUpEnd(state="failed", outcome=failed)
    if said is None:
        return FollowUpEnd(state="done", outcome="ignored: not a /ferry command and not a line Ferry wrote")
    _reply(t, ctx, said, resolve)
    return FollowUpEnd(state="done", outcome=said)


def _act_safely(t: Trigger, ctx: FollowUpContext) -> tuple[str | None, bool, str | None]:
    """``_act``'s (answer, resolve), its failures as answers; the third: an internal failure's outcome."""
    try:
        said, resolve = _act(t, ctx)
    except gitops.GitError as exc:
        said, resolve = f"Ferry could not do this: {md_inline(exc.public, keep_code=True)}", False
    except GitHubError as exc:
        said, resolve = f"Ferry could not do this: GitHub answered {md_inline(str(exc), keep_code=True)}", False
    except PrRefused as exc:
        said, resolve = f"Ferry could not do this: {md_inline(str(exc), keep_code=True)}", False
    except Exception as exc:  # a bug: still told, never dropped
        ask = t.review
        logger.exception("review follow-up %s of %s#%d failed", ask.comment_id if ask else None, t.full_name,
                         t.number)
        return (f"Ferry failed with an internal error ({type(exc).__name__}); the server's log has the details. "
                "Nothing more was changed."), False, f"internal: {type(exc).__name__}: {exc}"
    return said, resolve, None


def _expand(t: Trigger, ctx: FollowUpContext) -> FollowUpEnd:
    """A submitted review: each of its comments becomes its own job, keyed by the comment's id as its own
    ``pull_request_review_comment`` delivery is, so a comment both bring is answered once."""
    ask = t.review
    assert ask is not None and ask.review_id is not None
    permission = ctx.client.permission(t.owner, t.repo, t.sender)
    if permission not in WRITE:  # each comment's job would be ignored: none is queued (a big review, no flood)
        return FollowUpEnd(state="done", outcome=f"ignored: @{t.sender} has {permission} access")
    comments = ctx.client.comments_of_review(t.owner, t.repo, t.number, ask.review_id)
    queued = 0
    for c in comments:
        if ctx.config.bot_login and c.user.login == ctx.config.bot_login:
            continue
        line = c.line if c.line is not None else c.original_line
        one = ask.model_copy(update={"comment_id": c.id, "thread_id": c.thread_id, "path": c.path, "line": line,
                                     "side": c.side or "RIGHT", "commit_id": c.commit_id, "body": c.body})
        child = t.model_copy(update={"delivery": f"{t.delivery}-c{c.id}", "event": "pull_request_review_comment",
                                     "review": one, "payload_key": review_key(t.full_name, "comment", c.id)})
        queued += ctx.submit(child)
    outcome = (f"review {ask.review_id}: {queued} of its {len(comments)} comment(s) queued (the others were "
               "queued by their own delivery)")
    own, failed = _review_text(t, ctx)
    return FollowUpEnd(state="failed" if failed else "done", outcome=outcome + (f"; its text: {own}" if own else ""))


def _review_text(t: Trigger, ctx: FollowUpContext) -> tuple[str | None, bool]:
    """A submitted review's own text (its summary box), read when it is a ``/ferry`` command or the text of
    a change request, and answered on the pull request's conversation (it has no thread). Returns (what
    the job's outcome says of it, None when it is not for Ferry; whether it failed inside Ferry)."""
    ask = t.review
    assert ask is not None
    text, command = instruction(ask.body)
    if not command and (not text or ask.review_state != "changes_requested"):
        return None, False
    permission = ctx.client.permission(t.owner, t.repo, t.sender)
    if permission not in WRITE:
        return f"ignored: @{t.sender} has {permission} access", False
    key = f"review-{ask.review_id}"
    try:
        before = marked_before([(c.user.login, c.body) for c in ctx.client.issue_comments(t.owner, t.repo, t.number)],
                               key, ctx.config.bot_login, _writers(t, ctx))
    except GitHubError as exc:
        logger.warning("could not read the conversation of %s#%d: %s", t.full_name, t.number, exc)
        before = None
    if before is not None:
        return "answered before (a job repeated after a restart); no second answer", False
    said, _, failed = _act_safely(t, ctx)
    if said is None:
        return "not read as a request (left to the people on the pull request)", False
    try:
        ctx.client.comment(t.owner, t.repo, t.number, f"{said}\n\n{reply_mark(key, False)}")
    except GitHubError as exc:
        logger.error("could not answer review %s of %s#%d: %s", ask.review_id, t.full_name, t.number, exc)
    return failed or said, failed is not None


def reply_mark(key: str, resolve: bool) -> str:
    """The HTML comment (invisible on GitHub) that ends each of Ferry's answers: which comment or review it
    answers (``comment-<id>``, ``review-<id>``) and whether its thread was to be resolved."""
    return f"<!-- {MARK} {key}{' resolve' if resolve else ''} -->"


def marked_before(bodies: list[tuple[str, str]], key: str, bot: str | None,
                  trusted: Callable[[str], bool] | None = None) -> bool | None:
    """Whether one of ``bodies`` ((author, text) pairs) is Ferry's answer to ``key``: None when none is, else
    whether it asked for its thread to be resolved. With the bot's login known, only its comments count;
    without it, only those of authors ``trusted`` accepts (those with write access, Ferry's credentials
    among them): a passer-by's copy of the mark would silence the answer and resolve the thread."""
    for login, body in bodies:
        if bot and login != bot:
            continue
        for mark in (reply_mark(key, True), reply_mark(key, False)):
            if body.rstrip().endswith(mark):
                if not bot and trusted is not None and not trusted(login):
                    break
                return mark == reply_mark(key, True)
    return None


def _writers(t: Trigger, ctx: FollowUpContext) -> Callable[[str], bool]:
    """Whether a login has write access to the repository (asked once per login)."""
    known: dict[str, bool] = {}

    def may(login: str) -> bool:
        if login not in known:
            try:
                known[login] = ctx.client.permission(t.owner, t.repo, login) in WRITE
            except GitHubError as exc:
                logger.warning("could not read %s's access to %s: %s", login, t.full_name, exc)
                known[login] = False
        return known[login]

    return may


def _replied_before(t: Trigger, ctx: FollowUpContext) -> bool | None:
    ask = t.review
    assert ask is not None
    try:
        thread = [(c.user.login, c.body) for c in ctx.client.review_comments(t.owner, t.repo, t.number)
                  if c.thread_id == ask.thread_id and c.id != ask.comment_id]
    except GitHubError as exc:  # not known: the job goes on (its commit's trailer still prevents a second one)
        logger.warning("could not read the review thread %s of %s#%d: %s", ask.thread_id, t.full_name, t.number, exc)
        return None
    return marked_before(thread, f"comment-{ask.comment_id}", ctx.config.bot_login, _writers(t, ctx))


def _reply(t: Trigger, ctx: FollowUpContext, body: str, resolve: bool) -> None:
    ask = t.review
    assert ask is not None and ask.thread_id is not None
    try:
        ctx.client.reply_in_thread(t.owner, t.repo, t.number, ask.thread_id,
                                   f"{body}\n\n{reply_mark(f'comment-{ask.comment_id}', resolve)}")
    except GitHubError as exc:
        logger.error("could not answer review thread %s of %s#%d: %s", ask.thread_id, t.full_name, t.number, exc)
        return
    if resolve:
        _resolve(t, ctx)


def _resolve(t: Trigger, ctx: FollowUpContext) -> None:
    ask = t.review
    assert ask is not None and ask.thread_id is not None
    try:
        if not ctx.client.resolve_thread(t.owner, t.repo, t.number, ask.thread_id):
            logger.warning("no review thread of %s#%d starts with comment %d", t.full_name, t.number, ask.thread_id)
    except GitHubError as exc:
        logger.error("could not resolve review thread %s of %s#%d: %s", ask.thread_id, t.full_name, t.number, exc)


def _git_run(args: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "FERRY_GITHUB_"))}
    return subprocess.run(["git", *gitops.SAFE, *args], capture_output=True, text=True, env={**base, **env},
                          timeout=900, cwd=cwd)


def _act(t: Trigger, ctx: FollowUpContext) -> tuple[str | None, bool]:
    """(what the thread is told, whether the thread is resolved); None: nothing to say (not for Ferry)."""
    import shutil

    ask = t.review
    assert ask is not None
    text, command = instruction(ask.body)
    env = ctx.git_env()
    shutil.rmtree(ctx.work, ignore_errors=True)
    ctx.work.mkdir(parents=True)
    clone = ctx.work / "repo"
    url = ctx.config.clone_url.format(owner=t.owner, repo=t.repo)
    proc = _git_run(["clone", "-q", "--no-tags", "--branch", ask.branch, "--", url, str(clone)], env)
    if proc.returncode != 0:
        raise gitops.GitError(f"cloning {t.full_name} failed: {proc.stderr.strip()[-500:]}",
                              public=f"cloning {ask.branch} failed")
    author = GitIdentity.parse(ctx.config.author) if ctx.config.author else GitIdentity()
    done = gitops.git(clone, "log", "--format=%H", "-E", f"--grep=^{TRAILER}: {ask.comment_id}$",
                      "HEAD") if ask.comment_id is not None else ""
    if done:  # a job repeated after a restart: its commit is on the branch already
        sha = done.splitlines()[0]
        return f"Done in {md_code(sha[:12])} (this comment's commit is on {md_code(ask.branch)}).", True
    site = None
    # (a commit force-pushed away: its lines cannot be told)
    if ask.path and ask.line and ask.side == "RIGHT" and ask.commit_id and _has(clone, ask.commit_id):
        site = ferry_site(clone, ask.commit_id, ask.path, ask.line, author.email)
    if site is None and not command and ask.comment_id is not None:  # (a review's own text is read as asked)
        return None, False
    run, test = _commands(t, ctx)
    if command and (text == "migrate" or text.startswith(("migrate ", "migrate\n"))):
        try:  # `/ferry migrate [--run ...] [--test ...]` in a thread: a new attempt, as on the conversation
            asked = parse_command(f"{COMMAND}{text[len('migrate'):]}")
        except CommandError as exc:
            return f"Ferry could not read the command: {md_inline(str(exc), keep_code=True)}", False
        again: intents.SetOptions | intents.Retry = (
            intents.SetOptions(run=asked.run, test=asked.test) if asked and (asked.run or asked.test)
            else intents.Retry())
        return _again(t, ctx, clone, again, run, test, author, env)
    thread = _thread(t, ctx) if ask.comment_id is not None and (command or site is not None) else []
    reply = understand(text, facts_of(site, run or "", test), thread, site)
    if not command and reply.intent == "unknown":  # a remark, not a request: the people in the thread answer it
        return None, False
    action = reply.action
    if isinstance(action, intents.SkipRules):
        return _revert(t, ctx, clone, site, action.rules, run, test, author, env)
    if isinstance(action, intents.SetOptions | intents.Retry):
        return _again(t, ctx, clone, action, run, test, author, env)
    return reply.text, False


def _has(clone: Path, sha: str) -> bool:
    """Whether ``sha`` (a payload's commit id: only an object name is ever passed on to git) is a commit here."""
    if not _SHA.fullmatch(sha):
        return False
    return bool(gitops.git(clone, "rev-parse", "--verify", "--quiet", f"{sha}^{{commit}}", check=False))


def _thread(t: Trigger, ctx: FollowUpContext) -> list[ReviewComment]:
    ask = t.review
    assert ask is not None
    try:
        every = ctx.client.review_comments(t.owner, t.repo, t.number)
    except GitHubError as exc:
        logger.warning("could not read the review thread %s: %s", ask.thread_id, exc)
        return []
    mine = [c for c in every if c.thread_id == ask.thread_id and c.id <= (ask.comment_id or 0)]
    # the model reads the thread as instructions: only the comments of people who may command go in (and
    # Ferry's own), never a passer-by's reply (a run command, a rule to revert, slipped into the context)
    may: dict[str, bool] = {}
    for c in mine:
        login = c.user.login
        if login not in may:
            if login == t.sender or (ctx.config.bot_login and login == ctx.config.bot_login):
                may[login] = True
            else:
                try:
                    may[login] = ctx.client.permission(t.owner, t.repo, login) in WRITE
                except GitHubError as exc:
                    logger.warning("could not read %s's access to %s: %s", login, t.full_name, exc)
                    may[login] = False
    return [c for c in mine if may[c.user.login]]


def _commands(t: Trigger, ctx: FollowUpContext) -> tuple[str | None, str | None]:
    """The run and test commands the pull request was made with (its body's ``ferry pr`` line), else the
    trigger's (the server's FERRY_GITHUB_RUN / _TEST)."""
    try:
        body = ctx.client.pull(t.owner, t.repo, t.number).body or ""
    except GitHubError:
        body = ""
    for line in body.splitlines():
        line = line.strip()
        if not line.startswith("ferry pr "):
            continue
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        found = {flag: words[i + 1] for i, flag in enumerate(words[:-1]) if flag in ("--run", "--test")}
        if found.get("--run"):
            return found["--run"], found.get("--test")
    return t.run_command, t.test_command


def _revert(t: Trigger, ctx: FollowUpContext, clone: Path, site: FerrySite | None, rules: list[str],
            run: str | None, test: str | None, author: GitIdentity,
            env: dict[str, str]) -> tuple[str, bool]:
    ask = t.review
    assert ask is not None
    if site is None and ask.comment_id is None:  # a review's own text names no line
        return (f"A rule is reverted at a line: comment {md_code('/ferry revert ' + ' '.join(rules))} on the line "
                "Ferry changed, and Ferry undoes its change there only (the rule's other sites stay migrated). "
                "Nothing was changed.", False)
    if site is None:
        return ("This line is not one Ferry changed (`git blame` names another author), so there is no change of "
                f"{', '.join(rules)} to undo here. Nothing was changed.", False)
    named = [r for r in rules if r in site.rules] or (rules if not site.rules else [])
    where = f"{site.path} line {ask.line}"  # as the reviewer sees it (site.line: in Ferry's own commit)
    if not named:
        return (f"Ferry's change at {md_code(where)} is {', '.join(site.rules)}'s, not "
                f"{', '.join(rules)}'s: nothing of {', '.join(rules)} to undo here. Nothing was changed.", False)
    if not undo_at(clone, site, clone / site.path):
        return f"{md_code(where)} holds the original code already; nothing to change.", True
    what = ", ".join(named)
    message = (f"Revert {what} at {site.path}:{ask.line} as asked in review\n\n"
               f"@{t.sender} asked in a review thread of #{t.number}: {ask.body.strip()[:500]}\n"
               f"Ferry's change there (from {site.commit[:12]}) is undone at this line only; the rule's other "
               f"sites stay migrated.\n\n{TRAILER}: {ask.comment_id}\n")
    gitops.git(clone, "add", "--", site.path)
    sha = gitops.commit(clone, message, gitops.identity_env(author, None))
    if ctx.stop.is_set():
        return "Ferry: this follow-up was cancelled on the server; nothing was pushed.", False
    checks = _verify(clone, run, test, ctx.stop)
    pushed = _git_run(["-C", str(clone), "push", "--porcelain", "origin", f"HEAD:refs/heads/{ask.branch}"], env)
    if pushed.returncode != 0:
        return (f"Ferry made the change but could not push it: {md_code(ask.branch)} moved meanwhile (Ferry never "
                "force-pushes over a commit); comment again to redo it on the new head.", False)
    ran = "\n".join(f"- {md_code(v.command)} on tpx: {'passed' if v.ok else 'failed'} ({md_inline(v.detail)})"
                    for v in checks) or "- nothing: no run command is known for this pull request"
    ok = bool(checks) and all(v.ok for v in checks)
    words = "; ".join(f"{v.command} on tpx: {'passed' if v.ok else 'failed'}" for v in checks) or "nothing ran"
    try:
        verdict = revert_result(clone, before=f"{sha}^", head=sha, branch=ask.branch, base=ask.base, rules=named,
                                path=site.path, ok=ok, runs=words)
    except Exception:  # the scan of the new head failed: the pushed commit and its reply stand
        logger.exception("no check run for %s of %s", sha[:12], t.full_name)
        check = ""
    else:
        check = leave_check(ctx.client, t.owner, t.repo, verdict, ask.base, sha)
    return (f"Reverted {what} at {md_code(where)} only, in {md_code(sha[:12])} on {md_code(ask.branch)} "
            f"(the other commits on the branch are kept; the rule's other sites stay migrated).\n\n"
            f"Verified on the new head:\n{ran}" + ("" if ok else "\n\nThe thread stays open: the change did not "
                                                   "pass its runs.") + check, ok)


def _again(t: Trigger, ctx: FollowUpContext, clone: Path, action: intents.SetOptions | intents.Retry,
           run: str | None, test: str | None, author: GitIdentity, env: dict[str, str]) -> tuple[str, bool]:
    """A new attempt: ``ferry pr`` from the branch's current head (a person's commits there included) with
    the commands asked for; its commits, if any, go on top of that head (a fast-forward push)."""
    from agent.migration.facade import RunScheduler
    from agent.prbot.pr.core import make_pr

    ask = t.review
    assert ask is not None
    if isinstance(action, intents.SetOptions):
        run, test = action.run or run, action.test or test
    if not run:
        return "No run command is known for this pull request: say `/ferry run with python train.py`.", False
    head = gitops.git(clone, "rev-parse", "HEAD")
    gitops.git(clone, "checkout", "-q", "--detach")  # make_pr moves the branch: not checked out
    kept = reverted_rules(clone)  # what reviews undid here stays undone: those rules sit this attempt out
    runs = RunScheduler()
    try:
        result = make_pr(PrRequest(
            path=str(clone), run_command=run, test_command=test, base=head, branch=ask.branch,
            out_dir=str(ctx.work / "out"), state_dir=str(ctx.state_dir) if ctx.state_dir else None, author=author,
            device=action.device if isinstance(action, intents.SetOptions) and action.device else "accelerator",
            skip_rules=kept, partial_branch=True), runs=runs, stop=ctx.stop)
    finally:
        runs.close()
    if ctx.stop.is_set():
        return "Ferry: this follow-up was cancelled on the server; nothing was pushed.", False
    ran = f"run {md_code(run)}" + (f", tests {md_code(test)}" if test else "") + (
        f"; {', '.join(kept)} left out, as a review of this branch reverted {'it' if len(kept) == 1 else 'them'}"
        if kept else "")
    verdict = f"**{md_inline(result.status)}**: {md_inline(result.summary or '', keep_code=True)}"
    if result.head is None or result.head == head:
        return (f"Ran the migration again on {md_code(ask.branch)} at {md_code(head[:12])} ({ran}): {verdict}\n\n"
                "Nothing was left to change; no commit.", result.status == "migrated")
    pushed = _git_run(["-C", str(clone), "push", "--porcelain", "origin", f"{result.head}:refs/heads/{ask.branch}"],
                      env)
    if pushed.returncode != 0:
        return (f"Ferry migrated it again but could not push: {md_code(ask.branch)} moved meanwhile (Ferry never "
                "force-pushes over a commit); comment again to redo it on the new head.", False)
    made = ", ".join(md_code(c.sha[:12]) for c in result.commits)
    check = leave_check(ctx.client, t.owner, t.repo, result, ask.base, result.head)
    described = _describe(t, ctx, head, run, test, kept, result)
    return (f"Ran the migration again on {md_code(ask.branch)} from {md_code(head[:12])} ({ran}): {verdict}\n\n"
            f"New commit(s) on top of it: {made} (the commits before are kept).{described}{check}",
            result.status == "migrated")


def _describe(t: Trigger, ctx: FollowUpContext, head: str, run: str, test: str | None, kept: list[str],
              result: PrResult) -> str:
    """The pull request's body brought to the new attempt (``ferry_part.with_attempt``): its status, its
    ``ferry pr`` line's commands and the attempt's section; a person's text outside Ferry's part is kept.
    Returns what the reply says of it."""
    summary = md_inline(result.summary or "", keep_code=True)
    left = (f" {', '.join(kept)} left out: a review of this branch reverted "
            f"{'it' if len(kept) == 1 else 'them'}." if kept else "")
    section = "\n".join([
        "## Latest attempt (asked in a review)", "",
        f"{t.sender} asked in a review for the migration to run again; it ran from {md_code(head[:12])} (the "
        f"branch's head then) with run {md_code(run)}" + (f" and tests {md_code(test)}" if test else "")
        + f" and ended **{md_inline(result.status)}**: {summary}.{left}", "",
        *(f"- `{c.sha[:10]}` {md_inline(c.subject)}" for c in result.commits)])
    try:
        pull = ctx.client.pull(t.owner, t.repo, t.number)
        body = with_attempt(pull.body or "", section, f"**Status:** {result.status} — {summary} (the latest "
                                                       "attempt, asked in a review)", run, test)
        if body != (pull.body or ""):
            ctx.client.update_pull(t.owner, t.repo, t.number, title=pull.title, body=body)
    except GitHubError as exc:
        logger.warning("could not update the body of %s#%d: %s", t.full_name, t.number, exc)
        return "\n\nThe pull request's description still names the attempt before: GitHub refused its update."
    return "\n\nThe pull request's description now gives this attempt's commands and verdict."


def reverted_rules(clone: Path) -> list[str]:
    """The rules the branch's review commits reverted (their subjects: ``Revert FRY013 at prog.py:12 ...``)."""
    import re

    subjects = gitops.git(clone, "log", "--format=%s", "-F", f"--grep={TRAILER}: ", "HEAD").splitlines()
    found = [m.group(1) for s in subjects if (m := re.match(r"Revert (.+?) at \S+ as asked in review", s))]
    return list(dict.fromkeys(r.strip() for rules in found for r in rules.split(",")))


def _verify(clone: Path, run: str | None, test: str | None, stop: threading.Event) -> list[Verified]:
    """The run command, then the test command, on the new head: on tpx, in the sandbox (the runner)."""
    from tools.runner.api import run as run_once
    from tools.runner.models import RunRequest

    out: list[Verified] = []
    for command in (c for c in (run, test) if c):
        if stop.is_set():
            break
        try:
            res = run_once(RunRequest(path=clone, command=command, device="tpx", timeout_s=RUN_TIMEOUT_S), cancel=stop)
        except Exception as exc:  # the runner's refusal (a bad command) is a verification that failed
            out.append(Verified(command=command, ok=False, detail=f"{type(exc).__name__}: {str(exc)[:200]}"))
            continue
        detail = f"exit {res.exit_code}" if res.status == "ok" else f"{res.status}: {(res.error or '')[:200]}"
        out.append(Verified(command=command, ok=res.ok, detail=detail))
    return out
