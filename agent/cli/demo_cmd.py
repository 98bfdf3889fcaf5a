"""``ferry demo``: a short training run on tpx, printing what ran where."""

from __future__ import annotations

import argparse
import json

from agent.cli import numbers

NAME = "demo"
HELP = "train a small model for a few steps on the tpx device and report what ran where"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=numbers.positive_int, default=5, help="training steps (default 5)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from agent.cli import CliError
    from backend.demo import run_demo

    if args.steps < 1:
        raise CliError(f"--steps must be at least 1, got {args.steps}")
    report = run_demo(steps=args.steps)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        console = Console()
        console.print(f"[bold]tpx demo[/bold]: {report['model']} on device [cyan]{report['device']}[/cyan]")
        for i, loss in enumerate(report["losses"], 1):
            console.print(f"  step {i}: loss {loss:.4f}")
        table = Table(title="ops by device")
        table.add_column("op")
        table.add_column("calls", justify="right")
        table.add_column("where")
        for row in report["ops"]:
            table.add_row(row["op"], str(row["calls"]), row["where"])
        console.print(table)
    return 0
