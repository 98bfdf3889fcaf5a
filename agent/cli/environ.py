"""``--python``, ``--env KEY=VALUE`` and ``--cwd SUBDIR``: the user's own environment for the runs of
``ferry migrate``, ``check`` and ``run``, checked before anything runs (a bad value is exit 2 with what
was wrong and what to do)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.migration.adapters import RunEnvironment

PYTHON_HELP = ("the interpreter the code runs with (default: the active virtualenv's, $VIRTUAL_ENV/bin/python, "
               "else Ferry's); it needs torch==2.13.0, not Ferry")
ENV_HELP = ("a variable of your own for every run (repeatable), e.g. --env PYTHONPATH=. --env HF_HOME=/tmp/hf; "
            "it reaches only the sandboxed program; PYTHONPATH is kept after Ferry's bootstrap dir; FERRY_*/TPX_*, "
            "PATH, HOME, the runner's hooks, credentials and loader/interpreter variables (LD_*, PYTHON*, BASH_ENV...; "
            "docs/sandbox.md) are refused")
CWD_HELP = "start every run in this directory of the repository (relative to its root), e.g. --cwd examples/mnist"


def add_arguments(parser: argparse.ArgumentParser, *, env: bool = True) -> None:
    """``--python`` and ``--cwd`` (and ``--env`` unless the command defines its own)."""
    parser.add_argument("--python", metavar="PATH", default=None, help=PYTHON_HELP)
    if env:
        parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help=ENV_HELP)
    parser.add_argument("--cwd", metavar="SUBDIR", default=None, help=CWD_HELP)


def python_option(value: str | None) -> str | None:
    """The interpreter the runs use: ``value`` checked, or the default (the active virtualenv's);
    None when that is Ferry's own."""
    from agent.cli import CliError
    from tools.runner.interpreter import InterpreterError, default_python, inspect_interpreter

    path = value if value is not None else default_python()
    try:
        interp = inspect_interpreter(path)
    except InterpreterError as exc:
        if value is None:  # from $VIRTUAL_ENV: say where it came from
            raise CliError(f"{exc} (it is the active virtualenv's, $VIRTUAL_ENV; pass --python to choose "
                           "another, or deactivate it to use Ferry's own)") from None
        raise CliError(str(exc)) from None
    return None if interp.is_ferrys else interp.path


def env_option(items: list[str], flag: str = "--env") -> dict[str, str]:
    """Repeated ``KEY=VALUE`` of the user's own variables, each checked."""
    from agent.cli import CliError
    from tools.runner.env import user_env_problem, user_env_problems

    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"{flag} {item[:80]!r}: use KEY=VALUE, e.g. {flag} PYTHONPATH=.")
        problem = user_env_problem(key, value)
        if problem is not None:
            raise CliError(f"{flag} {key[:80]}: {problem}")
        env[key] = value
    problem = user_env_problems(env)  # their number and size together
    if problem is not None:
        raise CliError(f"{flag}: {problem}")
    return env


def cwd_option(value: str | None, repo: Path) -> str | None:
    """``--cwd``: a directory of ``repo``, relative to it, that stays inside it (the runner's own
    check, ``sandbox.execute.start_directory``, made early on the repository itself)."""
    from agent.cli import CliError
    from sandbox.execute import start_directory
    from tools.runner.models import cwd_problem

    if value is None:
        return None
    problem = cwd_problem(value)
    if problem is not None:
        raise CliError(f"--cwd {value}: {problem}")
    root = repo.expanduser().resolve()
    try:
        target = start_directory(root, value)
    except ValueError as exc:
        raise CliError(f"--cwd {value}: {exc}; give a directory inside {root}, relative to it") from None
    rel = target.relative_to(root).as_posix()
    return None if rel == "." else rel


def from_args(args: argparse.Namespace, repo: Path, env_items: list[str] | None = None) -> RunEnvironment:
    from agent.migration.adapters import RunEnvironment

    items = env_items if env_items is not None else list(getattr(args, "env", None) or [])
    return RunEnvironment(python=python_option(args.python), env=env_option(items),
                           cwd=cwd_option(args.cwd, repo))
