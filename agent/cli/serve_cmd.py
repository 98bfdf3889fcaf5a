"""``ferry serve``: the HTTP service (start migrations, status, results, approvals)."""

from __future__ import annotations

import argparse
import logging
import os

logger = logging.getLogger(__name__)

NAME = "serve"
HELP = "run the HTTP service (bearer token from FERRY_API_TOKEN when set)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    parser.add_argument("--state-dir", metavar="DIR", default=os.environ.get("FERRY_STATE_DIR"),
                        help="checkpoints and workspaces (default ~/.ferry)")
    parser.add_argument("--json", action="store_true", help="print the listening address as JSON before serving")


def run(args: argparse.Namespace) -> int:
    import json

    import uvicorn

    from agent.cli import CliError
    from agent.service.app import create_app
    from agent.service.deps import settings_from_env

    if not 0 < args.port < 65536:
        raise CliError(f"--port must be 1..65535, got {args.port}")
    settings = settings_from_env(args.state_dir)
    if args.host not in ("127.0.0.1", "localhost", "::1") and not settings.token:
        raise CliError(f"refusing to listen on {args.host} without a token: set FERRY_API_TOKEN")
    if args.json:
        print(json.dumps({"url": f"http://{args.host}:{args.port}", "state_dir": settings.state_dir}), flush=True)
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level="warning")
    return 0
