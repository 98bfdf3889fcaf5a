"""``make_pr``: migrate a clean git work tree from a base into a stable branch, one commit per step.

The user's checkout is never touched: the committed base is checked out into a temporary worktree,
migrated there, and the verified edits committed there (detached). The branch
(``ferry/migrate-<device>`` unless named) is then moved with a compare-and-swap, and only when the
migration ended ``migrated`` with changes (or ``partial``, when the request asks for it: the PR bot's
draft); a re-run that yields the same tree on the same base leaves
the branch as it is. Pushing is leased on what the remote held just before.
"""

from __future__ import annotations

import logging
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from agent.prbot.pr import gitops
from agent.prbot.pr.body import pr_body, title
from agent.prbot.pr.findings import findings_of
from agent.prbot.pr.models import CommitInfo, PrRefused, PrRequest, PrResult
from agent.prbot.pr.public import public_text
from agent.prbot.pr.steps import CommitStep, plan_commits

if TYPE_CHECKING:
    from agent.migration.facade import ProgressFn, RunScheduler
    from tools.scan.models import ScanReport

logger = logging.getLogger(__name__)


def _commit_steps(wt: Path, base_sha: str, directory: str, steps: list[CommitStep], patch: str,
                  env: dict[str, str]) -> tuple[list[CommitInfo], str | None]:
    """Commit the steps in order; falls back to one commit of the verified patch when the steps do not
    replay to exactly its tree. Returns the commits and a note when it fell back."""
    expected = gitops.patched_tree(wt, base_sha, patch, directory)
    commits: list[CommitInfo] = []
    note = None
    try:
        for step in steps:
            gitops.apply_index(wt, step.diff, directory)
            message = step.message(directory)
            sha = gitops.commit(wt, message, env)
            commits.append(CommitInfo(sha=sha, subject=message.splitlines()[0], files=gitops.files_of(wt, sha)))
        if gitops.tree_of(wt, "HEAD") != expected:
            raise gitops.GitError("the replayed steps differ from the verified patch")
    except gitops.GitError as exc:
        logger.warning("one commit instead of %d steps: %s", len(steps), exc)
        note = f"the edits could not be replayed step by step ({exc}); one commit holds the verified patch"
        gitops.git(wt, "reset", "-q", "--hard", base_sha)
        gitops.apply_index(wt, patch, directory)
        message = "Migrate CUDA code to device-generic PyTorch\n\nThe verified patch of ferry pr, in one commit.\n"
        sha = gitops.commit(wt, message, env)
        commits = [CommitInfo(sha=sha, subject=message.splitlines()[0], files=gitops.files_of(wt, sha))]
    return commits, note


def make_pr(req: PrRequest, progress: ProgressFn | None = None, runs: RunScheduler | None = None,
            stop: threading.Event | None = None) -> PrResult:
    """Migrate ``req.path``'s committed base in a temporary worktree and commit it onto the branch (pushed
    with ``push_remote``). ``runs``: the scheduler of its background runs (the caller's, to stop them
    when it gives up on the migration; a new one otherwise); ``stop``: the event that cancels the
    migration (``agent.migration.facade.cancel``)."""
    from agent.migration.facade import DEFAULT_STATE_DIR, new_migration_id, options_for, start, state_dir
    from agent.migration.records import ACCELERATOR, MigrationRecord

    path = Path(req.path).expanduser()
    top = gitops.toplevel(path)
    rel = path.resolve().relative_to(top.resolve())
    base, base_sha = gitops.resolve_base(top, req.base)
    directory = "" if str(rel) == "." else rel.as_posix()
    if directory and not gitops.git(top, "ls-tree", "-d", "--name-only", base_sha, directory, check=False):
        raise PrRefused(f"{directory} is not in the committed {base}; ferry pr works from the committed base, "
                        "commit it first")
    gitops.refuse_dirty(top, rel)
    branch = req.branch or f"ferry/migrate-{ACCELERATOR}"
    gitops.check_branch_name(top, branch)
    mid = new_migration_id()
    out = Path(req.out_dir) if req.out_dir else Path(tempfile.mkdtemp(prefix="ferry-pr-"))
    out.mkdir(parents=True, exist_ok=True)
    env = gitops.identity_env(req.author, req.committer)
    commits: list[CommitInfo] = []
    note = head = None
    with gitops.worktree(top, base_sha) as wt:
        opts = options_for(source=str(wt / rel), run_command=req.run_command, test_command=req.test_command,
                           out_dir=str(out), state_dir=str(state_dir(req.state_dir or DEFAULT_STATE_DIR)),
                           llm=req.llm, device=req.device, skip_rules=req.skip_rules, python=req.python,
                           env=req.env, cwd=req.cwd)  # the model's limits: FERRY_LLM_* or the defaults
        state = start(opts, migration_id=mid, progress=progress, runs=runs, stop=stop)
        outputs = state.outputs
        if outputs is None:
            raise PrRefused(f"the migration {mid} wrote no outputs ({state.status}: {state.summary})")
        result = MigrationRecord.model_validate_json(Path(outputs.result).read_text(encoding="utf-8"))
        patch = Path(outputs.patch).read_text(encoding="utf-8")
        plan = state.plan
        device = plan.target if plan is not None else ACCELERATOR
        headline = state.parity.headline() if state.parity is not None else None
        if (result.status == "migrated" or (req.partial_branch and result.status == "partial")) and patch.strip():
            commits, note = _commit_steps(wt, base_sha, directory, plan_commits(state.edits), patch, env)
            head = commits[-1].sha
        findings = findings_of(state, directory, _scan_head(wt / rel) if head is not None else None)
    old = gitops.branch_head(top, branch)
    # a fresh clone (CI, the service) has the branch only as the remote's: that is what a re-run compares with
    known = old or (gitops.remote_branch_head(top, req.push_remote, branch) if req.push_remote else None)
    updated = unchanged = False
    if head is not None:
        if known and gitops.tree_of(top, known) == gitops.tree_of(top, head) and \
                gitops.git(top, "merge-base", known, base_sha, check=False) == base_sha:
            unchanged, head = True, known  # the branch already holds this migration of this base
            commits = _commits_between(top, base_sha, known)
            if old is None:
                gitops.move_branch(top, branch, head, None)
        else:
            gitops.move_branch(top, branch, head, old)
            updated = known is not None
    reproduce = req.reproduce or _reproduce(req, base, directory)
    made = branch if head is not None else None
    text = pr_body(state, result, branch=made, base=base, device=device, commits=commits, reproduce=reproduce,
                   note=note, directory=directory)
    (out / "pr.md").write_text(text, encoding="utf-8")
    pushed = False
    if head is not None and req.push_remote:
        try:
            gitops.push(top, req.push_remote, branch, head, req.push_env)
        except gitops.GitError as exc:
            raise gitops.PushFailed(
                f"the branch {branch} holds the migration ({head[:12]}; pr.md in {out}) but pushing it to "
                f"{req.push_remote} failed: {exc}\nfix the cause, then push it (git push --force-with-lease "
                f"{req.push_remote} {branch}) or run ferry pr again (on the same base, a migration giving the same "
                f"tree finds the branch up to date and only pushes it)",
                branch=branch, head=head, remote=req.push_remote, cause=exc.public) from exc
        pushed = True
    summary = public_text(result.summary, directory) if result.summary else result.summary
    return PrResult(migration_id=mid, status=result.status, summary=summary, base=base, base_sha=base_sha,
                    branch=made, head=head, commits=commits, updated=updated, unchanged=unchanged, pushed=pushed,
                    title=title(device), body=text, out_dir=str(out), pr_text=str(out / "pr.md"),
                    parity=public_text(headline, directory) if headline else None, findings=findings)


def _scan_head(path: Path) -> ScanReport | None:
    """The scan of the migrated head (its findings at the head's lines); None when it fails."""
    from tools.scan.api import scan
    from tools.scan.models import ScanRequest

    try:
        return scan(ScanRequest(path=path, jobs=1))
    except Exception:  # the findings are extra: the branch stands without them
        logger.warning("the scan of the migrated head failed", exc_info=True)
        return None


def _commits_between(top: Path, base_sha: str, head: str) -> list[CommitInfo]:
    """The branch's commits on the base, as a fresh run would have reported them (files repository-relative)."""
    lines = gitops.git(top, "log", "--reverse", "--format=%H%x00%s", f"{base_sha}..{head}").splitlines()
    return [CommitInfo(sha=sha, subject=subject, files=gitops.files_of(top, sha))
            for sha, _, subject in (ln.partition("\0") for ln in lines)]


def _reproduce(req: PrRequest, base: str, directory: str) -> str:
    """The command that makes this branch again, from the repository's root: its settings, none of this
    machine's paths (no --out, --state-dir or --python; ``directory`` repository-relative) and no --json."""
    import shlex

    parts = ["ferry", "pr", directory or ".", "--base", base, "--run", req.run_command]
    if req.test_command:
        parts += ["--test", req.test_command]
    if req.branch:
        parts += ["--branch", req.branch]
    if req.push_remote:
        parts += ["--push", req.push_remote]
    if req.device != "accelerator":
        parts += ["--device", req.device]
    for rule in req.skip_rules:
        parts += ["--skip-rule", rule]
    for key, value in req.env.items():
        parts += ["--env", f"{key}={value}"]
    if req.cwd:
        parts += ["--cwd", req.cwd]
    if req.llm:
        parts.append("--llm")
    command = shlex.join(parts)
    if req.python:
        command = ("# in a virtualenv with the repository's dependencies and torch==2.13.0 (or pass --python)\n"
                   + command)
    return command
