"""``ferry serve``: the HTTP service (start migrations, status, results, approvals)."""

from __future__ import annotations

import argparse
import logging
import os
import socket
from pathlib import Path

logger = logging.getLogger(__name__)

NAME = "serve"
HELP = "run the HTTP service (bearer token from FERRY_API_TOKEN when set)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765,
                        help="port (default 8765; 0 picks a free one, printed with --json)")
    parser.add_argument("--state-dir", metavar="DIR", default=os.environ.get("FERRY_STATE_DIR"),
                        help="checkpoints and workspaces (default ~/.ferry)")
    parser.add_argument("--python", metavar="PATH", action="append", default=[],
                        help="an interpreter requests may name in 'python' (repeatable; default: only Ferry's own)")
    parser.add_argument("--json", action="store_true", help="print the listening address as JSON before serving")


def _check_store(state_dir: str) -> None:
    """Open the checkpoint store once, so a bad FERRY_DATABASE_URL or state dir fails here, not per request."""
    from agent.checkpoints import checkpointer
    from agent.cli import CliError
    from agent.errors import FerryAgentError

    try:
        with checkpointer(Path(state_dir)):
            pass
    except FerryAgentError as exc:  # already says what is wrong and what to do
        raise CliError(str(exc)) from exc
    except Exception as exc:  # sqlite: the state dir is not usable
        raise CliError(f"cannot open the checkpoint store in {state_dir}: {exc}; pick a writable --state-dir") from exc


def run(args: argparse.Namespace) -> int:
    import json

    import uvicorn

    from agent.cli import CliError, output_dir
    from agent.service.app import create_app
    from agent.service.deps import settings_from_env

    if not 0 <= args.port < 65536:
        raise CliError(f"--port must be 0..65535 (0: any free port), got {args.port}")
    if args.state_dir:
        output_dir(args.state_dir, "--state-dir")
    from tools.runner.interpreter import InterpreterError, inspect_interpreter

    pythons = []
    for path in args.python:
        try:
            pythons.append(inspect_interpreter(path).path)
        except InterpreterError as exc:
            raise CliError(f"--python {path}: {exc}") from exc
    try:
        settings = settings_from_env(args.state_dir, tuple(pythons))
    except OSError as exc:
        raise CliError(f"state dir {exc.filename or args.state_dir}: {exc.strerror or exc}; "
                       "give --state-dir a directory Ferry can create and write") from exc
    if args.host not in ("127.0.0.1", "localhost", "::1") and not settings.token:
        raise CliError(f"refusing to listen on {args.host} without a token: set FERRY_API_TOKEN")
    _check_store(settings.state_dir)
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as exc:
        sock.close()
        raise CliError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}; pick another --port") from exc
    port = sock.getsockname()[1]
    host = f"[{args.host}]" if family == socket.AF_INET6 else args.host
    if args.json:
        print(json.dumps({"url": f"http://{host}:{port}", "state_dir": settings.state_dir}), flush=True)
    logger.info("serving on http://%s:%d (state dir %s)", host, port, settings.state_dir)
    server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level="warning"))
    server.run(sockets=[sock])
    return 0
