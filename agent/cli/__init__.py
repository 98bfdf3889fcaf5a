"""The ``ferry`` command line.

Each sub-command lives in its own module under ``agent.cli`` and exposes ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``. Modules import heavy dependencies (torch,
libcst) inside ``run`` so that ``ferry --help`` stays fast.

Exit status (docs/design.md): 0 success, 1 the job ran but did not succeed, 2 bad usage or input.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from pathlib import Path
from types import ModuleType
from typing import NoReturn

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

# Order is the order shown by ``ferry --help``.
COMMAND_MODULES: tuple[str, ...] = (
    "agent.cli.demo_cmd",
    "agent.cli.scan_cmd",
    "agent.cli.rewrite_cmd",
    "agent.cli.run_cmd",
    "agent.cli.check_cmd",
    "agent.cli.doctor_cmd",
    "agent.cli.migrate_cmd",
    "agent.cli.resume_cmd",
    "agent.cli.replay_cmd",
    "agent.cli.trajectory_cmd",
    "agent.cli.pr_cmd",
    "agent.cli.serve_cmd",
    "agent.cli.bot_cmd",
    "agent.cli.mcp_cmd",
    "agent.cli.knowledge_cmd",
)


class CliError(Exception):
    """Bad usage or bad input: printed on stderr, exit status 2."""


def sandbox_settings(items: list[str], flag: str) -> dict[str, str]:
    """Repeated ``KEY=VALUE`` options (``--set``, ``--env``...) as the variables a sandboxed run gets.

    Only ``FERRY_*`` and ``TPX_*`` keys reach a sandboxed run; anything else is a usage error.
    """
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"{flag} {item!r}: use KEY=VALUE, e.g. {flag} TPX_MATMUL_PRECISION=highest")
        if not key.startswith(("FERRY_", "TPX_")):
            raise CliError(f"{flag} {key}: only FERRY_* and TPX_* settings reach the sandboxed runs")
        env[key] = value
    return env


def output_dir(value: object, flag: str) -> Path:
    """``value`` as a directory Ferry may create and write (``agent.migration.paths``), else a usage error."""
    from agent.migration.paths import OutputPathError, check_output_dir

    try:
        return check_output_dir(str(value), flag)
    except OutputPathError as exc:
        raise CliError(str(exc)) from exc


def disk_limit(value: str | None) -> int | None:
    """``--disk-limit SIZE`` (wins) or ``FERRY_DISK_LIMIT`` as bytes, None when neither is set; a
    value that is not a size is a usage error naming where it came from."""
    from sandbox.limits import disk_limit_from_env, parse_size

    if value is None:
        try:
            return disk_limit_from_env()
        except ValueError as exc:
            raise CliError(str(exc)) from None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise CliError(f"--disk-limit {exc}") from None


DISK_LIMIT_HELP = ("cap on all a run writes (workspace, /tmp, /dev/shm, artifacts), e.g. 512M, 4G "
                   "(default $FERRY_DISK_LIMIT, else what the host can back: at most 4G; see ferry doctor)")


COMMANDS_ENTRY_POINTS = "ferry.commands"  # commands other packages add (evals: ``ferry eval``)


def _load_commands() -> list[ModuleType]:
    """The built-in commands, then those registered under the ``ferry.commands`` entry points
    (each a module with NAME, HELP, add_arguments and run, like the built-in ones)."""
    from importlib.metadata import entry_points

    modules = [importlib.import_module(name) for name in COMMAND_MODULES]
    names = {m.NAME for m in modules}
    for ep in sorted(entry_points(group=COMMANDS_ENTRY_POINTS), key=lambda e: e.name):
        try:
            module = ep.load()
        except ImportError as exc:  # a broken plug-in must not take the whole CLI down
            logging.getLogger(__name__).warning("ferry command %s (%s) cannot be loaded: %s", ep.name, ep.value, exc)
            continue
        if module.NAME not in names:
            modules.append(module)
            names.add(module.NAME)
    return modules


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ferry",
        description="Move PyTorch code from CUDA to another accelerator (tpx built in).",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in _load_commands():
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


class _TerminalSafeFormatter(logging.Formatter):
    """Log lines as text a terminal shows literally: many quote what a sandboxed run chose (a refused
    artifact's name, a probe key, a malformed log line), which may hold escape sequences."""

    def format(self, record: logging.LogRecord) -> str:
        from tools.textsafe import terminal

        return terminal(super().format(record))


def _configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_TerminalSafeFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])


def main(argv: list[str] | None = None) -> int:
    from agent.cli import usage

    words = list(sys.argv[1:] if argv is None else argv)
    typed = usage.command_word(words)
    if typed == "migrate":  # its warm interpreter's torch import goes on while the parser is built
        from agent.cli.warm_first import warm_first

        warm_first(words)
    parser = build_parser()
    commands = usage.subcommands(parser)
    if typed is not None and typed not in commands:
        print(f"{parser.format_usage()}ferry: error: {usage.unknown_command(typed, list(commands))}", file=sys.stderr)
        return EXIT_USAGE
    try:
        args, extras = parser.parse_known_args(words)
    except SystemExit as exc:  # usage error or --help: argparse has printed why; the caller gets the code
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if extras:  # the sub-command's usage, not the top-level one, and how to quote a command given unquoted
        sub = usage.innermost(commands[args.command], words[words.index(args.command) + 1:])
        hint = usage.unquoted_command_hint(sub, words, extras)
        message = f"unrecognized arguments: {' '.join(extras)}" + (f"; {hint}" if hint else "")
        print(usage.usage_error(sub, message), end="", file=sys.stderr)
        return EXIT_USAGE
    args.argv = words  # the words as typed (argparse drops some `--`; `ferry run` needs to know)
    _configure_logging(args.verbose)
    from agent.migration.facade import MigrationLocked

    try:
        return int(args._run(args))
    except (CliError, MigrationLocked) as exc:  # another process drives this migration: usage, not failure
        print(f"ferry {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("ferry: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


def entry() -> NoReturn:
    """The ``ferry`` console script: :func:`main`, ended by :func:`exit_now` as ``python -m agent.cli`` is."""
    exit_now(main())


def exit_now(code: int) -> NoReturn:
    """End ``python -m agent.cli`` with ``code`` once its exit handlers have run (background runs stopped,
    warm interpreters closed, logs flushed) and its output is flushed, without the interpreter's module-by-
    module teardown, which takes about a second once torch is loaded: a second of every ``ferry migrate``
    that does nothing for the user. Where a thread that is not a daemon still runs, the ordinary exit waits
    for it as always."""
    import atexit
    import os
    import threading

    if any(t.is_alive() and not t.daemon and t is not threading.main_thread() for t in threading.enumerate()):
        sys.exit(code)
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
