"""``ferry scan PATH``: find CUDA idioms, classify them, propose rewrites."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.cli import numbers

if TYPE_CHECKING:
    from rich.console import Console

    from tools.scan.models import ScanReport

NAME = "scan"
HELP = ("find CUDA idioms in a repository (.py, notebooks; CUDA environment variables in shell/Docker/make/.env/"
        "YAML files), classify them and propose rewrites")

_STYLE = {"auto": "green", "review": "yellow", "unsupported": "red"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="repository folder or a single file (.py, .ipynb, shell script, "
                        "Dockerfile, Makefile, .env, YAML)")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the ScanReport as JSON (stable schema)")
    out.add_argument("--sarif", type=Path, metavar="FILE", help="write a SARIF 2.1.0 log to FILE")
    add_selection_arguments(parser, rules_verb="run", files_verb="scan")


def add_selection_arguments(parser: argparse.ArgumentParser, rules_verb: str, files_verb: str) -> None:
    """The options ``ferry scan`` and ``ferry rewrite`` share: which rules, which files, how many workers."""
    parser.add_argument("--rules", help=f"comma-separated rule ids to {rules_verb} (default: all)")
    parser.add_argument("--max-file-bytes", type=numbers.positive_int, default=2_000_000,
                        help="skip files larger than this (default 2000000)")
    parser.add_argument("--jobs", type=numbers.positive_int, default=None, help="worker processes (default: all cores)")
    parser.add_argument("--no-gitignore", action="store_true", help=f"also {files_verb} files .gitignore excludes")


def selection(args: argparse.Namespace) -> dict[str, Any]:
    """The checked shared options as ``ScanRequest``/``RewriteRequest`` fields (``CliError`` when out of range)."""
    from agent.cli import CliError

    if args.max_file_bytes <= 0:
        raise CliError(f"--max-file-bytes must be positive, got {args.max_file_bytes}")
    if args.jobs is not None and args.jobs < 1:
        raise CliError(f"--jobs must be at least 1, got {args.jobs}")
    return {"rules": parse_rules(args.rules), "max_file_bytes": args.max_file_bytes, "jobs": args.jobs,
            "respect_gitignore": not args.no_gitignore}


def parse_rules(text: str | None) -> list[str] | None:
    if text is None:
        return None
    rules = [r.strip().upper() for r in text.split(",") if r.strip()]
    return rules or None


def short(text: str, limit: int = 90) -> str:
    """The first sentence of ``text``, cut at ``limit`` characters."""
    first = text.strip().split(". ")[0].rstrip(".")
    return first if len(first) <= limit else first[:limit - 1].rstrip() + "…"


def console_for_table() -> Console:
    """A console as wide as the terminal; when the output is not one (a pipe, a file, CI logs),
    wide enough that rows do not wrap at 80 columns ($COLUMNS wins in both cases)."""
    import shutil

    from rich.console import Console

    return Console(width=max(shutil.get_terminal_size((200, 24)).columns, 60))


def render_table(report: ScanReport, console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table

    from tools.doclinks import idiom

    table = Table(title=f"CUDA idioms under {escape(report.root)}", show_lines=False)
    table.add_column("rule", no_wrap=True)
    table.add_column("where", no_wrap=True)  # a location is read whole (and clicked in some terminals)
    table.add_column("category", no_wrap=True)
    table.add_column("code", overflow="fold", ratio=2)
    table.add_column("message", overflow="fold", ratio=3)
    table.add_column("rewrite / nearest option", overflow="fold", ratio=2)
    names: dict[str, str] = {}
    for f in report.findings:
        where = f"{f.file}:{f.line}:{f.col}" if f.cell is None else f"{f.file}[cell {f.cell}]:{f.line}:{f.col}"
        style = _STYLE[f.category]
        names[f.rule_id] = f.rule_name
        table.add_row(f.rule_id, escape(where), f"[{style}]{f.category}[/{style}]", escape(f.snippet),
                      escape(short(f.message)), escape(f.rewrite or ""))
    console.print(table)
    s = report.summary
    cats = ", ".join(f"{k}: {v}" for k, v in s.by_category.items()) or "none"
    console.print(f"{s.findings} finding{'' if s.findings == 1 else 's'} ({cats}) in {s.files_scanned} "
                  f"file{'' if s.files_scanned == 1 else 's'}, {s.lines} lines; "
                  f"{s.files_skipped} skipped")
    if names:  # what each rule means, why, and what Ferry does about it
        console.print("what each rule matches and what Ferry does about it:")
        for rule_id, name in sorted(names.items()):
            console.print(f"  {rule_id} {escape(name)}: {idiom(rule_id)}")
    for note in report.notes:
        line = f":{note.line}" if note.line else ""
        console.print(f"[dim]note[/dim] {escape(note.file)}{line}: {note.kind}: {escape(note.message)}")


def run(args: argparse.Namespace) -> int:
    from agent.cli import CliError
    from tools.scan.api import ScanInputError, scan
    from tools.scan.models import ScanRequest

    try:
        report = scan(ScanRequest(path=args.path, **selection(args)))
    except ScanInputError as exc:
        raise CliError(f"{exc} (give a repository folder or a file of one of those kinds)") from exc
    if args.json:
        print(report.model_dump_json(indent=2))
        return 0
    console = console_for_table()
    if args.sarif:
        from tools.scan.sarif import to_sarif

        try:
            args.sarif.write_text(json.dumps(to_sarif(report), indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise CliError(f"cannot write SARIF to {args.sarif}: {exc}") from exc
        console.print(f"SARIF 2.1.0 log with {len(report.findings)} results written to {args.sarif}")
        return 0
    render_table(report, console)
    return 0
