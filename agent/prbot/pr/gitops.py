"""The git operations of ``ferry pr``: every call without the user's hooks, config-driven side effects
or prompts, so a repository's own git setup never runs code for Ferry or blocks it."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from agent.prbot.pr.models import GitIdentity, PrRefused
from tools.repopath import repo_path_problem

logger = logging.getLogger(__name__)

#: the user's git hooks and fsmonitor never run for Ferry's own git calls
#: and a status never rewrites the user's index (no optional locks)
SAFE = ("--no-optional-locks", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
        "-c", "commit.gpgsign=false")
DIRTY_SHOWN = 10


class GitError(RuntimeError):
    """A git command failed: the message names the command and git's own words; ``public`` is the same
    without the local path (what a GitHub thread is told)."""

    def __init__(self, message: str, *, public: str | None = None) -> None:
        super().__init__(message)
        self.public = public or message


class PushFailed(GitError):
    """The branch holds the migration (moved, pr.md written) but pushing it failed."""

    def __init__(self, message: str, *, branch: str, head: str, remote: str, cause: str) -> None:
        super().__init__(message, public=cause)
        self.branch, self.head, self.remote, self.cause = branch, head, remote, cause


def git(repo: Path, *args: str, check: bool = True, stdin: str | None = None,
        env: Mapping[str, str] | None = None, strip: bool = True) -> str:
    full_env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    proc = subprocess.run(["git", *SAFE, "-C", str(repo), *args], capture_output=True, text=True, input=stdin,
                          env=full_env)
    if check and proc.returncode != 0:
        # a push says why a ref was refused on stdout ("!" lines of --porcelain), the rest on stderr
        refused = [ln.strip() for ln in proc.stdout.splitlines() if ln.startswith("!")]
        said = "; ".join([*refused, proc.stderr.strip()])[-800:]
        public = said.replace(str(repo), "<repository>")
        for arg in args:  # worktree paths and the like: not the business of whoever reads the public text
            if arg.startswith("/") and len(arg) > 1:
                public = public.replace(arg, "<path>")
        raise GitError(f"git {' '.join(args[:3])} failed in {repo}: {said}",
                       public=f"git {' '.join(args[:3])} failed: {public}")
    return proc.stdout.strip() if strip else proc.stdout


def files_of(repo: Path, sha: str) -> list[str]:
    """The paths (repository-relative) a commit changes against its parent."""
    out = git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", "-z", sha, strip=False)
    return [p for p in out.split("\0") if p]


def toplevel(path: Path) -> Path:
    problem = repo_path_problem(path)
    if problem is not None:
        raise PrRefused(problem)
    if not path.is_dir():
        raise PrRefused(f"{path} is not a directory")
    top = git(path, "rev-parse", "--show-toplevel", check=False)
    if not top or not Path(top).is_dir():
        raise PrRefused(f"{path} is not inside a git repository; ferry pr needs one (use ferry migrate otherwise)")
    return Path(top)


def resolve_base(top: Path, base: str | None) -> tuple[str, str]:
    """The base's name (the current branch when None) and its commit."""
    name = base or git(top, "rev-parse", "--abbrev-ref", "HEAD", check=False)
    sha = git(top, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}", check=False) if name else ""
    if not sha:
        raise PrRefused(f"--base {name!r} is not a branch or commit of {top} (a new repository needs a first commit)")
    return name, sha


def refuse_dirty(top: Path, rel: Path) -> None:
    """Exit 2 when the migrated directory has tracked changes or untracked (not ignored) files."""
    out = git(top, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--",
              rel.as_posix() or ".", strip=False)
    entries = [e for e in out.split("\0") if e.strip()]
    tracked = [e[3:] for e in entries if not e.startswith("??") and len(e) > 3]
    untracked = [e[3:] for e in entries if e.startswith("??")]
    if not tracked and not untracked:
        return
    lines = [f"{top} has uncommitted work in {rel.as_posix() if str(rel) != '.' else 'the repository'}, "
             "which the migration would not see:"]
    if tracked:
        lines.append(f"  changed: {', '.join(tracked[:DIRTY_SHOWN])}{' ...' if len(tracked) > DIRTY_SHOWN else ''}")
    if untracked:
        lines.append(f"  untracked: {', '.join(untracked[:DIRTY_SHOWN])}"
                     f"{' ...' if len(untracked) > DIRTY_SHOWN else ''}")
    lines.append("commit it (git add -A && git commit), stash it (git stash -u) or ignore it (.gitignore), "
                 "then run ferry pr again")
    raise PrRefused("\n".join(lines))


def check_branch_name(top: Path, branch: str) -> None:
    if git(top, "check-ref-format", "--branch", branch, check=False) != branch:
        raise PrRefused(f"--branch {branch!r} is not a valid branch name")
    for line in git(top, "worktree", "list", "--porcelain").splitlines():
        if line == f"branch refs/heads/{branch}":
            raise PrRefused(f"the branch {branch} is checked out in a work tree; ferry pr moves it, so check out "
                            "another branch there (or give --branch NAME)")


def branch_head(top: Path, branch: str) -> str | None:
    return git(top, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}", check=False) or None


def remote_branch_head(top: Path, remote: str, branch: str) -> str | None:
    """The remote-tracking branch's commit (what the last fetch saw of ``remote``'s ``branch``)."""
    return git(top, "rev-parse", "--verify", "--quiet", f"refs/remotes/{remote}/{branch}^{{commit}}",
               check=False) or None


@contextmanager
def worktree(top: Path, base_sha: str) -> Iterator[Path]:
    """A detached temporary worktree at ``base_sha``: removed, with its admin entry, on every path out."""
    tmp = Path(tempfile.mkdtemp(prefix="ferry-pr-wt-"))
    wt = tmp / top.name
    try:
        git(top, "worktree", "add", "--detach", str(wt), base_sha)
        yield wt
    finally:
        admin = git(wt, "rev-parse", "--absolute-git-dir", check=False) if wt.is_dir() else ""
        git(top, "worktree", "remove", "--force", "--force", str(wt), check=False)
        shutil.rmtree(tmp, ignore_errors=True)
        if admin and Path(admin).is_dir() and Path(admin).parent.name == "worktrees":
            logger.warning("git worktree remove left %s behind; removing it", admin)
            shutil.rmtree(admin, ignore_errors=True)
        git(top, "worktree", "prune", check=False)


def identity_env(author: GitIdentity, committer: GitIdentity | None) -> dict[str, str]:
    c = committer or author
    return {"GIT_AUTHOR_NAME": author.name, "GIT_AUTHOR_EMAIL": author.email,
            "GIT_COMMITTER_NAME": c.name, "GIT_COMMITTER_EMAIL": c.email}


def commit(wt: Path, message: str, env: Mapping[str, str]) -> str:
    git(wt, "commit", "-q", "--no-verify", "--allow-empty-message", "-F", "-", stdin=message, env=env)
    return git(wt, "rev-parse", "HEAD")


def tree_of(repo: Path, rev: str) -> str:
    return git(repo, "rev-parse", f"{rev}^{{tree}}")


def patched_tree(wt: Path, base_sha: str, patch: str, directory: str) -> str:
    """The tree of ``base_sha`` with ``patch`` applied (in a private index: the worktree is untouched)."""
    fd, index = tempfile.mkstemp(prefix="ferry-pr-index-")
    os.close(fd)
    env = {"GIT_INDEX_FILE": index}
    try:
        git(wt, "read-tree", base_sha, env=env)
        if patch.strip():
            git(wt, "apply", "--cached", "--whitespace=nowarn", *directory_arg(directory), "-", stdin=patch, env=env)
        return git(wt, "write-tree", env=env)
    finally:
        os.unlink(index)


def apply_index(wt: Path, diff: str, directory: str) -> None:
    """Apply ``diff`` (paths relative to ``directory`` of the repository) to the worktree and its index."""
    git(wt, "apply", "--index", "--whitespace=nowarn", *directory_arg(directory), "-", stdin=diff)


def directory_arg(directory: str) -> list[str]:
    return [] if directory in ("", ".") else [f"--directory={directory}"]


def move_branch(top: Path, branch: str, new: str, old: str | None) -> None:
    """Point ``branch`` at ``new``, only if it still is ``old`` (None: only if it does not exist)."""
    git(top, "update-ref", "-m", "ferry pr", f"refs/heads/{branch}", new, old or "0" * len(new))


def push(top: Path, remote: str, branch: str, sha: str, env: Mapping[str, str]) -> None:
    """Push ``sha`` to ``remote``'s ``branch``, leased on what the remote had just before."""
    try:
        line = git(top, "ls-remote", remote, f"refs/heads/{branch}", env=env)
        expect = line.split()[0] if line else ""
        git(top, "push", "--porcelain", f"--force-with-lease=refs/heads/{branch}:{expect}", remote,
            f"{sha}:refs/heads/{branch}", env=env)
    except GitError as exc:  # the public text names the remote, not its URL (a path, an internal mirror)
        url = git(top, "remote", "get-url", remote, check=False)
        if url:
            exc.public = exc.public.replace(url, remote)
        raise
