"""``ferry pr``: migrate a git repository into a new branch (one commit) and write the PR text.

The user's checkout is never touched: the base branch is checked out into a temporary git
worktree, migrated there, and the patch committed on ``ferry/migrate-<id>``.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

NAME = "pr"
HELP = "migrate a git repo into a new branch commit and write the pull-request text"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH", help="a git repository")
    parser.add_argument("--base", metavar="BRANCH", help="branch to start from (default: the current branch)")
    parser.add_argument("--run", required=True, metavar="CMD", help="the command that runs the program")
    parser.add_argument("--test", metavar="CMD", help="the test command")
    parser.add_argument("--out", metavar="DIR", help="where pr.md, ferry.patch, report.md, result.json go (default: a temp dir)")
    parser.add_argument("--llm", action="store_true", help="let a model fix what the offline rules cannot")
    parser.add_argument("--state-dir", metavar="DIR", default=os.environ.get("FERRY_STATE_DIR"))
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _git(repo: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        from agent.cli import CliError

        raise CliError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def pr_text(result: dict, branch: str, base: str) -> str:
    lines = [f"# Migrate from CUDA to device-generic PyTorch (tpx verified)", "",
             f"Branch `{branch}` onto `{base}`, made by `ferry pr`.", "",
             f"**Status:** {result.get('status')} — {result.get('summary') or ''}", "",
             f"Iterations: {result.get('iterations')}, runs: {result.get('runs')}, "
             f"LLM calls: {result.get('llm', {}).get('calls', 0)}.", "", "## Changes", ""]
    for e in result.get("edits") or []:
        lines.append(f"- `{e.get('rule')}` ({e.get('kind')}) {', '.join(e.get('files') or [])}: {e.get('reason')}")
    parity = (result.get("parity") or {}).get("passed")
    lines += ["", "## Verification", "", f"- target run and tests on tpx: {'pass' if result.get('status') == 'migrated' else 'see report'}",
              f"- numeric parity against the original on CPU: {'pass' if parity else 'fail' if parity is False else 'not checked'}",
              "", "The full report (per-step reasons, parity table, profile findings, what is left for a human) is in report.md."]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    import json

    from agent.cli import CliError
    from agent.cli.progress import Progress
    from agent.graph import state_dir
    from agent.llm.config import configured
    from agent.migration import new_migration_id, start
    from agent.state import MigrationOptions
    from tools.patch import git_apply

    repo = Path(args.path).expanduser()
    if not repo.is_dir():
        raise CliError(f"{args.path} is not a directory")
    top_s = _git(repo, "rev-parse", "--show-toplevel", check=False)
    top = Path(top_s)
    if not top_s or not top.is_dir():
        raise CliError(f"{args.path} is not inside a git repository; ferry pr needs one (use ferry migrate otherwise)")
    base = args.base or _git(top, "rev-parse", "--abbrev-ref", "HEAD")
    if not _git(top, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}", check=False):
        raise CliError(f"--base {base!r} is not a branch or commit of {top}")
    mid = new_migration_id()
    branch = f"ferry/migrate-{mid}"
    out = Path(args.out).expanduser().resolve() if args.out else Path(tempfile.mkdtemp(prefix="ferry-pr-"))
    wt = Path(tempfile.mkdtemp(prefix="ferry-pr-wt-")) / top.name
    _git(top, "worktree", "add", "--detach", str(wt), base)
    try:
        sub = wt / repo.resolve().relative_to(top.resolve())
        opts = MigrationOptions(source=str(sub), run_command=args.run, test_command=args.test, out_dir=str(out),
                                state_dir=str(state_dir(args.state_dir)), llm=args.llm or configured())
        with Progress(enabled=not args.json) as progress:
            state = start(opts, migration_id=mid, progress=progress)
        result = json.loads((out / "result.json").read_text(encoding="utf-8"))
        patch = (out / "ferry.patch").read_text(encoding="utf-8")
        committed = False
        if state.get("status") == "migrated" and patch:
            _git(wt, "checkout", "-q", "-b", branch)
            git_apply(sub, patch)
            _git(wt, "add", "-A", "--", str(sub))
            _git(wt, "-c", "user.name=Ferry", "-c", "user.email=ferry@localhost", "commit", "-q", "-m",
                 f"Migrate CUDA code to device-generic PyTorch (ferry {mid})", "-m", result.get("summary") or "")
            committed = True
    finally:
        _git(top, "worktree", "remove", "--force", str(wt), check=False)
    text = pr_text(result, branch if committed else "(none)", base)
    (out / "pr.md").write_text(text, encoding="utf-8")
    if args.json:
        print(json.dumps({"migration_id": mid, "status": result.get("status"), "branch": branch if committed else None,
                          "base": base, "pr_text": str(out / "pr.md"), "out": str(out)}, indent=2))
    else:
        print(text)
        print(f"branch: {branch if committed else '(not created: ' + str(result.get('status')) + ')'}; outputs in {out}")
    return 0 if committed else 1
