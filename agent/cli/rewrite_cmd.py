"""``ferry rewrite PATH``: apply every auto-fix codemod; print a diff, or write with --write."""

from __future__ import annotations

import argparse
from pathlib import Path

from agent.cli.scan_cmd import add_selection_arguments

NAME = "rewrite"
HELP = "apply the auto-fix codemods to CUDA idioms (prints a unified diff; --write to change files)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="repository folder or a single .py/.ipynb file")
    parser.add_argument("--device", choices=("accelerator", "tpx"), default="accelerator",
                        help="accelerator (default): device-generic code using torch.accelerator with a CPU "
                             "fallback; tpx: pin the tpx device")
    parser.add_argument("--write", action="store_true", help="write the rewritten files (default: print the diff)")
    parser.add_argument("--json", action="store_true", help="print the RewriteResult as JSON")
    add_selection_arguments(parser, rules_verb="apply", files_verb="rewrite")


def run(args: argparse.Namespace) -> int:
    from agent.cli import CliError
    from agent.cli.scan_cmd import selection
    from tools.scan.api import ScanInputError, rewrite
    from tools.scan.models import RewriteRequest

    try:
        result = rewrite(RewriteRequest(path=args.path, device=args.device, **selection(args)))
    except ScanInputError as exc:
        raise CliError(f"{exc} (give a repository folder or a .py/.ipynb file)") from exc
    written: list[str] = []
    if args.write:
        root = Path(result.root)
        for f in result.files:
            target = root / f.file
            try:
                if target.read_text(encoding="utf-8") != f.original:
                    raise CliError(f"{target} changed while Ferry was rewriting it; run the command again")
                target.write_text(f.rewritten, encoding="utf-8")
            except OSError as exc:
                raise CliError(f"cannot write {target}: {exc}") from exc
            written.append(f.file)
    if args.json:
        print(result.model_dump_json(indent=2))
        return 0
    import sys

    from rich.console import Console

    err = Console(stderr=True)
    if not args.write:
        sys.stdout.write(result.diff)
    else:
        for name in written:
            err.print(f"rewrote {name}")
    err.print(f"{len(result.files)} file(s) changed; rules applied: {', '.join(result.applied_rules) or 'none'}; "
              f"{len(result.review)} site(s) left for review (run `ferry scan` to list them)")
    for w in result.warnings:
        err.print(f"[yellow]warning[/yellow] {w}")
    for n in result.notes:
        err.print(f"[dim]note[/dim] {n.file}: {n.kind}: {n.message}")
    return 0
