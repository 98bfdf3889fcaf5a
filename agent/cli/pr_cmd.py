"""``ferry pr``: migrate a git repository into a new branch (one commit) and write the PR text.

The user's checkout is never touched: the committed ``--base`` is checked out into a temporary
git worktree (uncommitted changes of the user are not part of it), migrated there, and the
verified patch committed. The branch ``ferry/migrate-<id>`` is created only once that commit
exists, so a migration that does not end ``migrated`` creates no branch. The worktree, its
temporary directory and its ``git worktree`` entry are removed on every path out.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

NO_HOOKS = ("-c", "core.hooksPath=/dev/null")  # the user's git hooks never run for ferry's own git calls

NAME = "pr"
HELP = "migrate a git repo into a new branch commit and write the pull-request text"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH", help="a git repository (or a directory inside one)")
    parser.add_argument("--base", metavar="BRANCH", help="branch or commit to start from (default: the current HEAD)")
    parser.add_argument("--run", required=True, metavar="CMD", help="the command that runs the program")
    parser.add_argument("--test", metavar="CMD", help="the test command")
    parser.add_argument("--out", metavar="DIR",
                        help="where pr.md, ferry.patch, report.md, result.json go (default: a temp dir)")
    parser.add_argument("--llm", action="store_true", help="let a model fix what the offline rules cannot")
    parser.add_argument("--state-dir", metavar="DIR", default=os.environ.get("FERRY_STATE_DIR"))
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _git(repo: Path, *args: str, check: bool = True, stdin: str | None = None) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, input=stdin)
    if check and proc.returncode != 0:
        from agent.cli import CliError

        raise CliError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def _commit_patch(wt: Path, rel: Path, patch: str, message: list[str]) -> str:
    """Apply the verified patch in the worktree's index and commit it (detached); returns the commit."""
    directory = [] if str(rel) == "." else [f"--directory={rel.as_posix()}"]
    _git(wt, *NO_HOOKS, "apply", "--index", "--whitespace=nowarn", *directory, "-", stdin=patch)
    _git(wt, *NO_HOOKS, "-c", "user.name=Ferry", "-c", "user.email=ferry@localhost", "-c", "commit.gpgsign=false",
         "commit", "-q", "--no-verify", *[a for m in message for a in ("-m", m)])
    return _git(wt, "rev-parse", "HEAD")


def _drop_worktree(top: Path, wt: Path, tmp: Path) -> None:
    """Remove the temporary worktree, its directory and its admin entry, whatever state it is in."""
    admin = _git(wt, "rev-parse", "--absolute-git-dir", check=False) if wt.is_dir() else ""
    _git(top, *NO_HOOKS, "worktree", "remove", "--force", "--force", str(wt), check=False)
    shutil.rmtree(tmp, ignore_errors=True)
    if admin and Path(admin).is_dir() and Path(admin).parent.name == "worktrees":
        logger.warning("git worktree remove left %s behind; removing it", admin)
        shutil.rmtree(admin, ignore_errors=True)


def run(args: argparse.Namespace) -> int:
    import json

    from agent.cli import CliError, output_dir
    from agent.cli.migrate_cmd import llm_limits
    from agent.cli.progress import Progress, exit_code
    from agent.early import new_migration_id
    from agent.llm.config import configured
    from agent.materialise import DEFAULT_STATE_DIR, state_dir
    from agent.migration import start
    from agent.records import MigrationRecord
    from agent.render import pr_markdown
    from agent.state import MigrationOptions, outputs_of, with_llm_limits

    repo = Path(args.path).expanduser()
    if not repo.is_dir():
        raise CliError(f"{args.path} is not a directory")
    top_s = _git(repo, "rev-parse", "--show-toplevel", check=False)
    top = Path(top_s)
    if not top_s or not top.is_dir():
        raise CliError(f"{args.path} is not inside a git repository; ferry pr needs one (use ferry migrate otherwise)")
    base = args.base or _git(top, "rev-parse", "--abbrev-ref", "HEAD")
    if not _git(top, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}", check=False):
        raise CliError(f"--base {base!r} is not a branch or commit of {top} (a new repository needs a first commit)")
    rel = repo.resolve().relative_to(top.resolve())
    if str(rel) != "." and not _git(top, "ls-tree", "-d", "--name-only", base, rel.as_posix(), check=False):
        raise CliError(f"{rel} is not in the committed {base}; ferry pr works from the committed base, commit it first")
    sdir = output_dir(args.state_dir or DEFAULT_STATE_DIR, "--state-dir")
    mid = new_migration_id()
    branch = f"ferry/migrate-{mid}"
    out = output_dir(args.out, "--out") if args.out else Path(tempfile.mkdtemp(prefix="ferry-pr-"))
    tmp = Path(tempfile.mkdtemp(prefix="ferry-pr-wt-"))
    wt = tmp / top.name
    commit = None
    try:
        _git(top, *NO_HOOKS, "worktree", "add", "--detach", str(wt), base)
        opts = MigrationOptions(source=str(wt / rel), run_command=args.run, test_command=args.test, out_dir=str(out),
                                state_dir=str(state_dir(sdir)), llm=args.llm or configured())
        opts = with_llm_limits(opts, llm_limits(args))  # FERRY_LLM_* or the defaults
        with Progress(enabled=not args.json) as progress:
            state = start(opts, migration_id=mid, progress=progress)
        outputs = outputs_of(state)
        if outputs is None:
            raise CliError(f"the migration {mid} wrote no outputs ({state.get('status')}: {state.get('summary')})")
        result = MigrationRecord.model_validate_json(Path(outputs.result).read_text(encoding="utf-8"))
        patch = Path(outputs.patch).read_text(encoding="utf-8")
        if result.status == "migrated" and patch.strip():
            commit = _commit_patch(wt, rel, patch, [f"Migrate CUDA code to device-generic PyTorch (ferry {mid})",
                                                    result.summary or ""])
            _git(top, *NO_HOOKS, "branch", branch, commit)  # the branch appears only once its one commit exists
    finally:
        _drop_worktree(top, wt, tmp)
    made = branch if commit else None
    text = pr_markdown(state, result, made, base)
    (out / "pr.md").write_text(text, encoding="utf-8")
    if args.json:
        print(json.dumps({"migration_id": mid, "status": result.status, "summary": result.summary,
                          "branch": made, "commit": commit, "base": base, "pr_text": str(out / "pr.md"),
                          "out": str(out)}, indent=2))
    else:
        print(text)
        print(f"branch: {made or '(not created: ' + result.status + ')'}; outputs in {out}")
    return exit_code(state)
