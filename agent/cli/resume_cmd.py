"""``ferry resume``: continue an interrupted or waiting migration from its last checkpoint."""

from __future__ import annotations

import argparse
from typing import Any

from agent.settings import settings

NAME = "resume"
HELP = "continue a migration from its last checkpoint (after a crash, or to answer an approval)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("migration_id", metavar="ID", nargs="?", help="the migration id printed by ferry migrate")
    parser.add_argument("--state-dir", metavar="DIR", default=settings().paths.state_dir,
                        help="where the checkpoints are (default ~/.ferry or $FERRY_STATE_DIR)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--approve", action="store_true", help="approve the pending edit")
    group.add_argument("--allow-cost", type=float, metavar="USD", default=None,
                       help="answer a reached cost cap (approve_cost): allow USD more for the model")
    group.add_argument("--reject", action="store_true", help="reject the pending edit (the migration stops: rejected)")
    group.add_argument("--edit", action="append", metavar="PATH=FILE",
                       help="replace the pending edit by your own text for PATH")
    parser.add_argument("--list", action="store_true", help="list the migrations in the state dir")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    import json

    from agent.cli import CliError, output_dir
    from agent.cli.approval import drive_interactively, parse_edits
    from agent.cli.progress import TerminalProgress, exit_code, print_result
    from agent.errors import FerryAgentError
    from agent.ids import ID_RULE, id_problem
    from agent.migration.facade import (
        DEFAULT_STATE_DIR,
        RunScheduler,
        UnknownMigration,
        list_migrations,
        resume,
        state_dir,
    )

    sdir = str(state_dir(output_dir(args.state_dir or DEFAULT_STATE_DIR, "--state-dir")))
    if args.list:
        try:
            ids = list_migrations(sdir)
        except FerryAgentError as exc:  # the checkpointer is not usable (e.g. Postgres server down)
            raise CliError(str(exc)) from exc
        print(json.dumps(ids, indent=2) if args.json else ("\n".join(ids) or "no migrations"))
        return 0
    if not args.migration_id:
        raise CliError("give the migration ID to resume (ferry resume --list shows them)")
    problem = id_problem(args.migration_id)
    if problem is not None:
        shown = args.migration_id if len(args.migration_id) <= 60 else args.migration_id[:60] + "..."
        raise CliError(f"ID {shown!r}: {problem}; {ID_RULE} (ferry resume --list shows the ids)")
    runs = RunScheduler()
    answer: dict[str, Any] | None = None
    if args.approve:
        answer = {"action": "approve"}
    elif args.allow_cost is not None:
        if not args.allow_cost > 0 or args.allow_cost == float("inf"):
            raise CliError(f"--allow-cost must be a number of US dollars above 0, got {args.allow_cost}")
        answer = {"action": "approve", "amount_usd": args.allow_cost}
    elif args.reject:
        answer = {"action": "reject"}
    elif args.edit:
        answer = {"action": "edit", "files": parse_edits(args.edit)}
    try:
        with TerminalProgress(enabled=not args.json) as progress:
            state = resume(args.migration_id, sdir, answer=answer, progress=progress, runs=runs)
    except UnknownMigration as exc:
        raise CliError(f"{exc}; check the id (ferry resume --list) and --state-dir") from exc
    except FerryAgentError as exc:  # the checkpointer is not usable (e.g. Postgres extra missing)
        raise CliError(str(exc)) from exc
    state = drive_interactively(state, sdir, args.json, runs)
    if state.waiting:
        return 1
    print_result(state, args.json)
    return exit_code(state)
