"""``ferry mcp``: Ferry's tools for coding agents over the Model Context Protocol (stdio, or HTTP with --http)."""

from __future__ import annotations

import argparse
import hashlib
import logging
from pathlib import Path

from agent.cli import numbers

logger = logging.getLogger(__name__)

NAME = "mcp"
HELP = "serve Ferry's tools to a coding agent over MCP (stdio by default; --http for streamable HTTP)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from agent.cli import serve_cmd

    serve_cmd.add_arguments(parser)
    parser.add_argument("--http", action="store_true",
                        help="serve streamable HTTP at http://HOST:PORT/mcp (tokens from FERRY_API_TOKENS) instead "
                             "of stdio")
    parser.add_argument("--call-timeout", type=numbers.seconds, default=1800.0, metavar="SECONDS",
                        help="longest one tool call may take (default 1800)")
    parser.add_argument("--run-timeout", type=numbers.seconds, default=900.0, metavar="SECONDS",
                        help="longest one sandboxed run of run/check/profile may take (default 900)")
    parser.add_argument("--concurrent-runs", type=numbers.positive_int, default=2, metavar="N",
                        help="run/check/profile calls one client may have in flight (default 2)")
    parser.add_argument("--max-text", type=numbers.positive_int, default=20_000, metavar="CHARS",
                        help="text returned by one tool call before it is cut, with a pointer to the whole "
                             "(default 20000)")
    parser.add_argument("--accept-tests", metavar="PATH", default=None,
                        help="(a person, not an agent) accept the tests of the repository at PATH as they are now: "
                             "they become what the agent's later edits are checked against; then exit")
    parser.add_argument("--owner", default=None, metavar="NAME",
                        help="with --accept-tests over HTTP: the owner whose baseline it is (default: the local user)")
    parser.epilog = ("Over stdio the repositories an agent may name are the current directory's unless "
                     "--allow-root names others, and the data dir defaults to one per working directory "
                     "under ~/.ferry/mcp. See docs/mcp.md for agent settings.")


def _stdio_defaults(args: argparse.Namespace) -> None:
    """Over stdio, a local agent works in one project: the current directory is its allowed root and its data
    dir is its own (two agents in two projects do not share one)."""
    from agent.settings import settings

    env = settings().service
    if args.allow_root is None and not env.allow_root_list():
        args.allow_root = [str(Path.cwd())]
    if args.data_dir is None:
        key = hashlib.sha256(str(Path.cwd().resolve()).encode()).hexdigest()[:12]
        args.data_dir = str(Path("~/.ferry/mcp").expanduser() / key)


def run(args: argparse.Namespace) -> int:
    from agent.cli import CliError, serve_cmd
    from agent.mcp.context import McpLimits

    limits = McpLimits(call_timeout_s=args.call_timeout, run_timeout_s=args.run_timeout,
                       concurrent_runs=args.concurrent_runs, max_text_chars=max(1000, args.max_text))
    if args.accept_tests is not None:
        return _accept_tests(args)
    if args.http:
        from agent.mcp.http import standalone

        settings = serve_cmd._settings(args)
        return serve_cmd.serve(args, settings, lambda s: standalone(s, limits), mcp=True, pages=False)
    _stdio_defaults(args)
    settings = serve_cmd._settings(args)
    serve_cmd._check_store(settings.data_dir)
    from agent.service.lock import DataDirBusy

    try:
        return _stdio(settings, limits)
    except DataDirBusy as exc:
        raise CliError(f"{exc}; give this server its own --data-dir") from exc


def _stdio(settings: object, limits: object) -> int:
    import anyio
    from mcp.server.stdio import stdio_server

    from agent.mcp.context import McpLimits, Server
    from agent.mcp.server import build
    from agent.service.app import service_core
    from agent.service.settings import ServiceSettings

    assert isinstance(settings, ServiceSettings) and isinstance(limits, McpLimits)

    async def main() -> None:
        with service_core(settings) as (store, workers):
            server = build(Server(settings=settings, store=store, workers=workers, transport="stdio", limits=limits))
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

    logger.info("MCP over stdio (data dir %s, allowed roots %s)", settings.data_dir,
                ", ".join(str(r) for r in settings.allow_roots))
    anyio.run(main)
    return 0


def _accept_tests(args: argparse.Namespace) -> int:
    from agent.cli import CliError, serve_cmd
    from agent.mcp import baseline
    from agent.mcp.context import Server
    from agent.service.settings import LOCAL_OWNER

    if not args.http:
        _stdio_defaults(args)
    settings = serve_cmd._settings(args)
    repo = Path(args.accept_tests).expanduser().resolve()
    if not repo.is_dir():
        raise CliError(f"--accept-tests {args.accept_tests}: not a directory; give the repository folder")
    store = Server.calls_dir_of(settings.data_dir, args.owner or LOCAL_OWNER)
    baseline.record(store, repo, replace=True)
    print(f"the tests of {repo} as they are now are what later edits are checked against")
    return 0
