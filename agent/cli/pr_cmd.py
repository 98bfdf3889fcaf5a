"""``ferry pr``: migrate a clean git work tree into the branch ``ferry/migrate-<device>`` (one commit
per step), optionally push it, and write the pull request's text (pr.md). ``agent.prbot.pr.core`` does
the work; the user's checkout and other branches are never touched."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent.cli import environ
from agent.cli.migrate_cmd import add_rewrite_arguments
from agent.prbot.pr.models import GitIdentity
from agent.settings import settings

NAME = "pr"
HELP = "migrate a git repo into a reviewable branch (one commit per step) and write the pull-request text"
AUTHOR_ENV = "FERRY_GIT_AUTHOR"
COMMITTER_ENV = "FERRY_GIT_COMMITTER"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH", help="a git repository (or a directory inside one)")
    parser.add_argument("--base", metavar="BRANCH", help="branch or commit to start from (default: the current HEAD)")
    parser.add_argument("--branch", metavar="NAME",
                        help="the branch to make or update (default: ferry/migrate-<device>; a re-run updates it)")
    parser.add_argument("--push", metavar="REMOTE", help="push the branch to this remote (leased force-push)")
    parser.add_argument("--run", required=True, metavar="CMD", help="the command that runs the program")
    parser.add_argument("--test", metavar="CMD", help="the test command")
    parser.add_argument("--out", metavar="DIR",
                        help="where pr.md, ferry.patch, report.md, result.json go (default: a temp dir)")
    parser.add_argument("--author", metavar="'NAME <EMAIL>'", default=settings().git.author,
                        help=f"the commits' author (default ${AUTHOR_ENV}, else Ferry <ferry@localhost>)")
    parser.add_argument("--committer", metavar="'NAME <EMAIL>'", default=settings().git.committer,
                        help=f"the commits' committer (default ${COMMITTER_ENV}, else the author)")
    parser.add_argument("--llm", action="store_true", help="let a model fix what the offline rules cannot")
    parser.add_argument("--state-dir", metavar="DIR", default=settings().paths.state_dir)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    add_rewrite_arguments(parser)  # --device, --skip-rule: as ferry migrate's
    environ.add_arguments(parser)  # --python, --env, --cwd (relative to PATH): as ferry migrate's


def _identity(text: str | None, flag: str) -> GitIdentity | None:
    from agent.cli import CliError

    if not text:
        return None
    try:
        return GitIdentity.parse(text)
    except ValueError as exc:
        raise CliError(f"{flag}: {exc}; give e.g. {flag} 'Ferry Bot <ferry@example.com>'") from None


def run(args: argparse.Namespace) -> int:
    from agent.cli import CliError, output_dir
    from agent.cli.migrate_cmd import llm_limits, skipped_rules
    from agent.cli.progress import TerminalProgress
    from agent.llm.config import configured
    from agent.prbot.pr.core import make_pr
    from agent.prbot.pr.gitops import GitError, PushFailed
    from agent.prbot.pr.models import PrRefused, PrRequest

    if not args.run.strip():
        raise CliError('--run is empty; give the command that runs the program, e.g. --run "python train.py"')
    llm_limits(args)  # a bad FERRY_LLM_* is exit 2 before anything starts
    author = _identity(args.author, "--author") or GitIdentity()
    skip_rules = skipped_rules(args.skip_rules)
    own = environ.from_args(args, Path(args.path))  # checked before anything starts: exit 2 with what to do
    req = PrRequest(path=args.path, run_command=args.run, test_command=args.test or None, base=args.base,
                    branch=args.branch, push_remote=args.push,
                    out_dir=str(output_dir(args.out, "--out")) if args.out else None, state_dir=args.state_dir,
                    llm=args.llm or configured(), device=args.device, skip_rules=skip_rules, python=own.python,
                    env=own.env, cwd=own.cwd, author=author, committer=_identity(args.committer, "--committer"))
    try:
        with TerminalProgress(enabled=not args.json) as progress:
            result = make_pr(req, progress=progress)
    except PrRefused as exc:
        raise CliError(str(exc)) from None
    except PushFailed as exc:  # the branch was moved: saying "nothing changed" would be wrong
        print(f"ferry pr: {exc}", file=sys.stderr)
        return 1
    except GitError as exc:
        raise CliError(f"{exc}\nnothing of your checkout was changed; fix the cause and run ferry pr again") from None
    if args.json:
        print(result.model_dump_json(indent=2, exclude={"body"}))
    else:
        print(result.body)
        where = (f"updated {result.branch}" if result.updated else f"{result.branch} already up to date"
                 if result.unchanged else f"made {result.branch}" if result.branch
                 else f"no branch ({result.status})")
        print(f"branch: {where}{'; pushed to ' + str(args.push) if result.pushed else ''}; outputs in "
              f"{result.out_dir}")
    return 0 if result.status == "migrated" else 1
