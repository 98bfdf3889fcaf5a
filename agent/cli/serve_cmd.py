"""``ferry serve``: the HTTP service (start migrations, status, results, approvals)."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.cli import numbers
from agent.settings import (
    DEFAULT_BODY_IDLE_S,
    DEFAULT_BODY_TOTAL_S,
    DEFAULT_HEADER_S,
    ServiceEnv,
    SettingsError,
    settings,
)

logger = logging.getLogger(__name__)

NAME = "serve"
SERVICE_DATABASE_ENV = "FERRY_SERVICE_DATABASE"
HELP = "run the HTTP service: chat-style migration sessions (tokens from FERRY_API_TOKENS)"


def _defaults() -> ServiceEnv:
    """The flags' defaults from the environment (agent.settings); a bad value exits 2 naming the variable."""
    try:
        return settings().service
    except SettingsError as exc:
        sys.stderr.write(f"ferry: error: {exc}\n")  # argparse's form: usage error, exit 2
        raise SystemExit(2) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env = _defaults()
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=numbers.port, default=8765,
                        help="port (default 8765; 0 picks a free one, printed with --json)")
    parser.add_argument("--data-dir", "--state-dir", dest="data_dir", metavar="DIR",
                        default=env.data_dir,
                        help="sessions, workspaces, outputs, checkpoints (default $FERRY_DATA_DIR or ~/.ferry/service)")
    parser.add_argument("--allow-root", metavar="DIR", action="append", default=None,
                        help="a server directory whose repositories clients may name by path (repeatable; "
                             "default $FERRY_ALLOW_ROOTS, ':'-separated, else none: uploads only)")
    parser.add_argument("--workers", type=numbers.positive_int, default=env.workers,
                        help="sessions migrated at once (default $FERRY_WORKERS, else the number of cores)")
    parser.add_argument("--executor", choices=("thread", "ray"), default="thread",
                        help="where the migrations run: in this server's worker threads (default), or as Ray "
                             "tasks on a Ray cluster, one CPU each (the ray extra; see --ray-address)")
    parser.add_argument("--ray-address", metavar="ADDR", default="local",
                        help="with --executor ray: the cluster's GCS address HOST:PORT, 'auto' (the cluster "
                             "this host is part of) or 'local' (a cluster started in this process; default)")
    parser.add_argument("--queue", type=numbers.positive_int, default=env.queue,
                        help="sessions waiting for a worker before new ones get 429 (default $FERRY_QUEUE or 64)")
    parser.add_argument("--max-upload-mb", type=numbers.positive_int, default=env.max_upload_mb,
                        help="largest archive accepted (default $FERRY_MAX_UPLOAD_MB or 50)")
    parser.add_argument("--max-files", type=numbers.positive_int, default=env.max_files,
                        help="most files in an upload (default $FERRY_MAX_FILES or 5000)")
    parser.add_argument("--max-unpacked-mb", type=numbers.positive_int, default=env.max_unpacked_mb,
                        help="most bytes an upload unpacks to (default $FERRY_MAX_UNPACKED_MB or 500)")
    parser.add_argument("--python", metavar="PATH", action="append", default=[],
                        help="an interpreter sessions may name in 'python' (repeatable; default: only Ferry's own)")
    parser.add_argument("--allowed-host", metavar="NAME[:PORT]", action="append", default=None,
                        help="a Host name this server answers for besides loopback and its --host address, e.g. "
                             "the name a proxy or GitHub uses (repeatable; default $FERRY_ALLOWED_HOSTS, "
                             "comma-separated)")
    parser.add_argument("--header-timeout", metavar="SECONDS", type=numbers.seconds,
                        default=env.header_timeout,
                        help="a request's line and headers must arrive within this, else the connection is "
                             f"closed (default $FERRY_HEADER_TIMEOUT or {DEFAULT_HEADER_S:g})")
    parser.add_argument("--body-timeout", metavar="SECONDS", type=numbers.seconds,
                        default=env.body_timeout,
                        help="longest pause in a request body before the connection is closed (default "
                             f"$FERRY_BODY_TIMEOUT or {DEFAULT_BODY_IDLE_S:g})")
    parser.add_argument("--body-total-timeout", metavar="SECONDS", type=numbers.seconds,
                        default=env.body_total_timeout,
                        help="longest time a request body may take in all, however steadily it arrives (default "
                             f"$FERRY_BODY_TOTAL_TIMEOUT or {DEFAULT_BODY_TOTAL_S:g})")
    parser.add_argument("--database", metavar="URL", default=None,
                        help="a postgresql:// URL: sessions, events and checkpoints in that database, its queue "
                             "shared by every server given the same URL and --data-dir (a shared filesystem); "
                             "default $FERRY_SERVICE_DATABASE, else SQLite in the data dir (one server)")
    parser.add_argument("--lease", metavar="SECONDS", type=numbers.seconds, default=env.lease,
                        help="with --database: a claimed session's lease, renewed every third of it; a session "
                             "whose server missed it goes to another server (default %(default)g)")
    parser.add_argument("--json", action="store_true", help="print the listening address as JSON before serving")
    parser.add_argument("--no-mcp", action="store_true",
                        help="leave out the MCP endpoint at /mcp (coding agents; same tokens as the API)")


def _check_store(data_dir: Path) -> None:
    """Open the checkpoint store once, so a bad FERRY_DATABASE_URL or data dir fails here, not per request."""
    from agent.cli import CliError
    from agent.errors import FerryAgentError
    from agent.migration.facade import check_store

    try:
        check_store(data_dir)
    except FerryAgentError as exc:  # already says what is wrong and what to do
        raise CliError(str(exc)) from exc
    except Exception as exc:  # sqlite: the data dir is not usable
        raise CliError(f"cannot open the checkpoint store in {data_dir}: {exc}; pick a writable --data-dir") from exc


def _settings(args: argparse.Namespace) -> Any:
    from agent.cli import CliError
    from agent.prbot.github.config import GitHubConfig, GitHubConfigError
    from agent.service.settings import (
        ServiceSettings,
        SettingsError,
        allowed_hosts,
        data_dir_from,
        resolve_roots,
        tokens_from_env,
    )
    from agent.service.uploads import UploadLimits
    from tools.runner.interpreter import InterpreterError, inspect_interpreter

    roots = args.allow_root if args.allow_root is not None else \
        settings().service.allow_root_list()
    pythons = []
    for path in args.python:
        try:
            pythons.append(inspect_interpreter(path).path)
        except InterpreterError as exc:
            raise CliError(f"--python {path}: {exc}") from exc
    try:
        github = GitHubConfig.from_env()
    except GitHubConfigError as exc:
        raise CliError(str(exc)) from None
    database = _database(args.database)
    try:
        return ServiceSettings(data_dir=data_dir_from(args.data_dir), database_url=database, lease_s=args.lease,
                               tokens=tokens_from_env(), github=github,
                               allow_roots=resolve_roots(roots), workers=args.workers or os.cpu_count() or 1,
                               queue=args.queue, pythons=tuple(pythons), bind_host=args.host,
                               allowed_hosts=allowed_hosts(args.allowed_host),
                               header_timeout_s=args.header_timeout, body_idle_timeout_s=args.body_timeout,
                               body_total_timeout_s=args.body_total_timeout,
                               executor=getattr(args, "executor", "thread"),
                               ray_address=getattr(args, "ray_address", "local"),
                               uploads=UploadLimits(max_bytes=args.max_upload_mb * 1024**2, max_files=args.max_files,
                                                    max_unpacked_bytes=args.max_unpacked_mb * 1024**2))
    except SettingsError as exc:
        raise CliError(str(exc)) from exc


def _database(flag: str | None) -> str | None:
    """``--database`` (wins) or ``$FERRY_SERVICE_DATABASE``: the service's sessions, events, GitHub jobs and
    checkpoints all go there (``$FERRY_DATABASE_URL`` alone moves only the checkpoints, as before)."""
    from agent.cli import CliError
    from agent.migration.facade import DATABASE_URL_ENV
    from agent.redact import redact_dsn

    url = flag if flag is not None else settings().service.service_database
    if not url:
        return None
    if not url.startswith(("postgres://", "postgresql://")):
        raise CliError(f"--database must be a postgresql:// URL (postgresql://USER:PASSWORD@HOST:PORT/DBNAME), got "
                       f"{redact_dsn(url)!r}")
    os.environ[DATABASE_URL_ENV] = url  # the checkpoints
    os.environ[SERVICE_DATABASE_ENV] = url  # the PR bot's jobs (agent.prbot.store)
    return url


def _back_workers(settings: Any, *, explicit: bool) -> Any:
    """The settings with as many workers as the host's memory can back (``sandbox.hostmem``): the
    sessions (the workers, and the PR bot's job workers when it is on) each have a foreground run and a
    background reference run in flight, with the tests and CPU checks on spare cores beside them
    (``hostmem.runs_in_flight``), each run needing at least ``MIN_RUN_MEMORY`` + ``MIN_RUN_DISK``. Too
    many ``--workers``/``$FERRY_WORKERS`` is an error; the default (the number of cores) is lowered to
    what fits. The per-run defaults follow."""
    from agent.cli import CliError
    from sandbox import hostmem
    from sandbox.sizes import format_size

    bot = settings.github.workers if settings.github is not None else 0

    def runs(workers: int) -> int:
        return hostmem.runs_in_flight(workers + bot)

    host = hostmem.budget(runs(settings.workers))
    fits = 0
    while fits < settings.workers and runs(fits + 1) <= host.max_runs():
        fits += 1
    if not host.fits():
        per_run = format_size(hostmem.MIN_RUN_MEMORY + hostmem.MIN_RUN_DISK)
        bots = f" and the PR bot's {bot} job worker(s)" if bot else ""
        if explicit or fits < 1:
            raise CliError(f"--workers {settings.workers}: these sessions{bots} run up to "
                           f"{runs(settings.workers)} sandboxed runs at once (a foreground and a reference run "
                           f"each, tests and CPU checks on spare cores), each needing at least {per_run}; this "
                           f"host can give its runs {format_size(host.usable_bytes)} (of "
                           f"{format_size(host.total_bytes)}), enough for {fits} worker(s). Lower --workers (or "
                           f"$FERRY_WORKERS) to {max(fits, 1)} or less"
                           + ("" if fits >= 1 else ", lower $FERRY_PARALLEL_RUNS or $FERRY_GITHUB_WORKERS, or run "
                                                   "the server on a host with more memory"))
        logger.warning("ferry serve: %d workers (one per core) would need more memory than this host has; "
                       "using %d (set --workers to choose)", settings.workers, fits)
        settings = settings.model_copy(update={"workers": fits})
    host = hostmem.set_runs_in_flight(runs(settings.workers))
    logger.info("ferry serve: per-run defaults %s", host.describe())
    return settings


def run(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if args.no_mcp:
        from agent.service.app import create_app

        return serve(args, settings, create_app)
    from agent.mcp.http import service_with_mcp

    return serve(args, settings, service_with_mcp, mcp=True)


def serve(args: argparse.Namespace, settings: Any, factory: Callable[[Any], Any], *, mcp: bool = False,
          pages: bool = True) -> int:
    """Check ``settings``, take the port and serve ``factory(settings)`` until stopped (``ferry serve``, and
    ``ferry mcp --http`` with only the MCP endpoint: ``pages`` False)."""
    import json

    import uvicorn

    from agent.cli import CliError
    from agent.service.deadlines import KEEP_ALIVE_S, protocol_with
    from agent.service.lock import DataDirBusy, hold_data_dir

    if logging.getLogger().getEffectiveLevel() > logging.INFO:  # a service says what it does (-q not given)
        logging.getLogger("agent.service").setLevel(logging.INFO)
    if args.host not in ("127.0.0.1", "localhost", "::1") and not settings.tokens:
        raise CliError(f"refusing to listen on {args.host} without tokens: set FERRY_API_TOKENS (owner=token,...)")
    if settings.github is not None and not settings.tokens:  # GitHub must reach it: so can anyone else
        raise CliError("the GitHub webhook is configured, so this server is reachable from outside: set "
                       "FERRY_API_TOKENS (owner=token,...) so that its sessions and jobs need a token")
    if settings.executor != "ray":  # on Ray, the runs are the cluster's, not this host's
        settings = _back_workers(settings, explicit=args.workers is not None)
    else:
        from agent.service.ray_executor import RayUnavailable, check_ray

        try:  # here, not in the middle of the server's start: Ray missing, nothing at the address
            check_ray(settings.ray_address)
        except RayUnavailable as exc:
            raise CliError(str(exc)) from exc
    _check_store(settings.data_dir)
    try:  # fail here, before the port is taken, when another server has this data dir
        os.close(hold_data_dir(settings.data_dir, settings.host_id if settings.database_url else None))
    except DataDirBusy as exc:
        raise CliError(str(exc)) from exc
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
    url = f"http://{host}:{port}"
    if args.json:
        print(json.dumps({"url": url, "data_dir": str(settings.data_dir)}), flush=True)
    # where to go, for a person (on stderr under --json: stdout is then one JSON line for programs)
    lines = [f"listening on {url}"] + ([f"  chat page: {url}/", f"  API docs:  {url}/docs"] if pages else []) + \
        ([f"  MCP:       {url}/mcp"] if mcp else [])
    print("\n".join(lines), flush=True, file=sys.stderr if args.json else sys.stdout)
    logger.info("serving on http://%s:%d (data dir %s, %d workers, %d allowed roots)", host, port,
                settings.data_dir, settings.workers, len(settings.allow_roots))
    if settings.tokens and host.strip("[]") in ("0.0.0.0", "::") and not settings.allowed_hosts:
        logger.warning("listening on every address without --allowed-host: the Host header is not checked (the "
                       "API needs a token); name the server's public names with --allowed-host to check it")
    protocol = protocol_with(settings.header_timeout_s, settings.body_idle_timeout_s,
                             settings.body_total_timeout_s)
    server = uvicorn.Server(uvicorn.Config(factory(settings), log_level="warning", timeout_graceful_shutdown=5,
                                           http=protocol, timeout_keep_alive=KEEP_ALIVE_S))
    server.run(sockets=[sock])
    return 0
