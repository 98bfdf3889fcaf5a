"""``ferry bot sweep ORG``: the PR bot over a whole organisation, as a cron job (``agent.prbot.sweep``):
each repository listed, scanned, and a migration pull request opened for those with CUDA findings;
a table (or ``--json``) says what became of each and why."""

from __future__ import annotations

import argparse
import fcntl
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from agent.cli import numbers

if TYPE_CHECKING:
    from agent.prbot.sweep.models import SweepReport

NAME = "bot"
HELP = "the PR bot from the command line: `ferry bot sweep ORG` opens migration PRs across an organisation"

SHOWN = {"opened": "PR opened", "updated": "PR updated", "would_open": "would open", "clean": "clean",
         "no_changes": "no changes", "not_migrated": "not migrated", "skipped": "skipped", "failed": "failed",
         "not_reached": "not reached"}
STYLE = {"opened": "green", "updated": "green", "would_open": "cyan", "failed": "red", "not_migrated": "yellow",
         "not_reached": "yellow"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bot_command", metavar="SUBCOMMAND")
    sub.required = True
    sweep = sub.add_parser("sweep", help="list ORG's repositories, scan each, open a migration PR for those with "
                                         "CUDA findings (rate-limited, idempotent across runs)",
                           description="list ORG's repositories, scan each (a shallow clone of its default branch; "
                                       "the scan runs nothing), and open a migration pull request for those with "
                                       "CUDA findings. Credentials and clone URL: FERRY_GITHUB_* as for ferry serve.")
    sweep.add_argument("org", metavar="ORG", help="the GitHub organisation whose repositories to sweep")
    sweep.add_argument("--run", metavar="CMD", help="the command that runs each repository's program "
                                                    "(default $FERRY_GITHUB_RUN)")
    sweep.add_argument("--test", metavar="CMD", help="the test command (default $FERRY_GITHUB_TEST)")
    sweep.add_argument("--max-prs", type=numbers.non_negative_int, default=5,
                       help="migrations (each a pull request opened or updated) in this run at most (default 5); "
                            "the rest wait for the next run")
    sweep.add_argument("--delay", type=numbers.non_negative_seconds, default=10.0, metavar="SECONDS",
                       help="pause before each pull request after the first (default 10)")
    sweep.add_argument("--max-wait", type=numbers.non_negative_seconds, default=900.0, metavar="SECONDS",
                       help="longest wait for GitHub's rate limit to reset (default 900); longer, the sweep "
                            "stops, saying until when")
    sweep.add_argument("--max-size", type=numbers.non_negative_float, default=2048.0, metavar="MB",
                       help="a repository GitHub lists as larger is skipped, never cloned (default 2048)")
    sweep.add_argument("--dry-run", action="store_true", help="scan and report; open nothing, record nothing")
    sweep.add_argument("--data-dir", metavar="DIR", default=None,
                       help="the bot's data dir, where what was swept is kept (default: ferry serve's, "
                            "$FERRY_DATA_DIR or ~/.ferry/service)")
    sweep.add_argument("--json", action="store_true", help="machine-readable output")


@contextmanager
def _one_sweep(data_dir: Path, org: str) -> Iterator[None]:
    """One sweep of an organisation at a time per data dir (a cron run that overlaps the last one)."""
    from agent.cli import CliError

    path = data_dir / "github" / f"sweep-{org.lower()}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CliError(f"another sweep of {org} is running on {data_dir}; this one does nothing") from None
        yield


def run(args: argparse.Namespace) -> int:
    from agent.cli import EXIT_FAILED, EXIT_OK, CliError
    from agent.prbot.github.client import GitHubClient, GitHubError
    from agent.prbot.github.config import GitHubConfig, GitHubConfigError
    from agent.prbot.sweep.models import SweepOptions
    from agent.prbot.sweep.run import ORG_NAME, Sweeper
    from agent.service.settings import SettingsError, data_dir_from

    if not ORG_NAME.fullmatch(args.org):
        raise CliError(f"{args.org!r} is not an organisation's name (letters, digits and '-', at most 39)")
    try:
        config = GitHubConfig.from_env(webhook=False)
    except GitHubConfigError as exc:
        raise CliError(str(exc)) from None
    if config is None:
        raise CliError("no GitHub credentials: set FERRY_GITHUB_TOKEN, or FERRY_GITHUB_APP_ID with "
                       "FERRY_GITHUB_PRIVATE_KEY (as for ferry serve's PR bot)")
    run_command = args.run or config.run_command
    if not run_command:
        raise CliError('no run command: give --run "python train.py" (or set FERRY_GITHUB_RUN)')
    try:
        data_dir = data_dir_from(args.data_dir)
    except SettingsError as exc:
        raise CliError(str(exc)) from None
    options = SweepOptions(run_command=run_command, test_command=args.test or config.test_command,
                           max_prs=args.max_prs, delay_s=args.delay, max_wait_s=args.max_wait, dry_run=args.dry_run,
                           max_size_mb=args.max_size)
    with _one_sweep(data_dir, args.org), GitHubClient(config) as client:
        try:
            report = Sweeper(client, config, data_dir, options).sweep(args.org)
        except GitHubError as exc:  # the listing itself was refused (no such organisation, credentials)
            print(f"ferry bot sweep: GitHub refused the listing of {args.org}: {exc}", file=sys.stderr)
            return EXIT_FAILED
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        render(report)
    return EXIT_OK if report.ok else EXIT_FAILED


def render(report: SweepReport) -> None:
    from rich.table import Table

    from agent.cli.progress import plain
    from agent.cli.scan_cmd import console_for_table

    console = console_for_table()
    table = Table(title=f"ferry bot sweep {plain(report.org)}: {report.repositories} repositories, "
                        f"{report.pull_requests} pull request(s)", title_justify="left")
    table.add_column("repository", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("findings", justify="right")
    table.add_column("why")
    for r in report.results:
        style = STYLE.get(r.outcome)
        result = f"[{style}]{SHOWN[r.outcome]}[/]" if style else SHOWN[r.outcome]
        why = plain(r.reason) + (f"\n{plain(r.pr_url)}" if r.pr_url else "")
        table.add_row(plain(r.repo), result, "" if r.findings is None else str(r.findings), why)
    console.print(table)
    if report.waited_s:
        console.print(f"waited {report.waited_s:.0f} s for GitHub's rate limit")
    if report.stopped:
        console.print(f"[red]stopped[/]: {plain(report.stopped)}")
