"""``ferry eval``: migrate the sample repositories and show a table of statuses.

A command of the ``ferry`` CLI registered through the ``ferry.commands`` entry point (pyproject.toml),
so that the CLI in ``agent`` never imports ``evals``.
"""

from __future__ import annotations

import argparse

NAME = "eval"
HELP = "migrate every sample repo of a suite (default evals/repos) and tabulate the statuses"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", metavar="SUITE_DIR", nargs="?",
                        help="directory of */eval.json cases (default evals/repos)")
    parser.add_argument("--jobs", type=int, default=1, help="cases migrated in parallel (default 1)")
    parser.add_argument("--policy", choices=("offline", "llm"), default="offline",
                        help="fixing policy (default offline)")
    parser.add_argument("--out", metavar="DIR", default="ferry-eval",
                        help="where each case's outputs go (default ./ferry-eval)")
    parser.add_argument("--case", action="append", metavar="NAME", help="run only this case (repeatable)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per case (default 1800)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from agent.cli import CliError, output_dir
    from evals.harness import DEFAULT_SUITE, SuiteError, run_suite

    if args.jobs < 1:
        raise CliError(f"--jobs must be at least 1, got {args.jobs}")
    suite = Path(args.suite).expanduser() if args.suite else DEFAULT_SUITE
    try:
        outcomes = run_suite(suite, output_dir(args.out, "--out"), jobs=args.jobs, policy=args.policy,
                             timeout_s=args.timeout, only=args.case)
    except SuiteError as exc:
        raise CliError(str(exc)) from exc
    if args.json:
        print(json.dumps([o.model_dump() for o in outcomes], indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        from agent.cli.progress import plain

        t = Table(title=f"ferry eval ({args.policy}) — {sum(o.passed for o in outcomes)}/{len(outcomes)} as expected")
        for col in ("case", "status", "expected", "iter", "runs", "LLM calls", "wall s", "summary"):
            t.add_column(col)
        for o in outcomes:
            colour = "green" if o.passed else "red"
            t.add_row(o.name, f"[{colour}]{o.status}[/{colour}]", o.expected, str(o.iterations), str(o.runs),
                      str(o.llm_calls), f"{o.wall_s:.1f}", plain(o.summary[:80]))
        Console().print(t)
    return 0 if all(o.passed for o in outcomes) else 1
