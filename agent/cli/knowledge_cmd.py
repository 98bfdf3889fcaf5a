"""``ferry knowledge``: search or rebuild the knowledge base the model searches (``agent.knowledge``)."""

from __future__ import annotations

import argparse
import json
import sys

from agent.cli import numbers

NAME = "knowledge"
HELP = "search the knowledge base (catalogue rules, fixes, policy rules, numerics tiers, earlier fixes), or rebuild it"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    search = sub.add_parser("search", help="the best matches for a trace, an exception message or an API name")
    search.add_argument("text", nargs="?", help="what to search for ('-' or none: read it from stdin)")
    search.add_argument("-k", type=numbers.positive_int, default=5, help="how many matches (default 5)")
    search.add_argument("--json", action="store_true", help="print the matches as JSON")
    sub.add_parser("rebuild", help="build the index again from its sources")


def run(args: argparse.Namespace) -> int:
    from agent.cli import EXIT_FAILED, EXIT_OK, CliError
    from agent.knowledge import KnowledgeBase, KnowledgeError

    kb = KnowledgeBase.default()
    try:
        if args.action == "rebuild":
            count = kb.build()
            print(f"{count} documents indexed in {kb.path}" + ("" if kb.checkout else
                                                               " (no repository checkout: no golden fixtures)"))
            return EXIT_OK
        if args.k < 1:
            raise CliError(f"-k must be at least 1, got {args.k}")
        text = sys.stdin.read() if args.text in (None, "-") else args.text
        matches = kb.search(text, args.k)
    except KnowledgeError as exc:
        print(f"ferry knowledge: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps([{"kind": m.label, "id": m.id, "title": m.title, "text": m.text, "score": m.score}
                          for m in matches], indent=2))
    elif not matches:
        print("no matches")
    for i, m in enumerate(matches if not args.json else [], 1):
        print(f"{i}. [{m.label}] {m.id}: {m.title}\n   {m.text}")
    return EXIT_OK if matches else EXIT_FAILED
