"""``ferry migrate``'s warm interpreter, started from the words as typed, before the parser exists.

The reference run and the first tpx runs fork from the warm interpreter (``tools.runner.warm``), which
imports torch first (about a second on one core); building the command line's parser takes a fifth of a
second of its own (Ferry's settings). So ``agent.cli.main`` hands a ``migrate`` command line here before
it builds the parser, and the interpreter's import starts that much sooner.

Only where the words say for certain what the parsed options will: this reads ``--seed``, ``--python`` and
``--env`` as typed and leaves every abbreviation of them to argparse (it then starts nothing, and
``migrate_cmd.start_warm`` starts the interpreter after parsing, as before). An interpreter started for a
command line the parser then rejects closes at exit. :func:`runs_start_warm` is the one rule for which
runs fork from Ferry's warm interpreter at all, for this and for ``start_warm``.
"""

from __future__ import annotations

import sys

from agent.cli.numbers import SEED_MAX  # (the bound the parser's --seed checks)

FLAGS_READ = ("--seed", "--python", "--env")


def runs_start_warm(python: str | None, env: object) -> bool:
    """Whether the migration's runs fork from Ferry's warm interpreter: they run on Ferry's own interpreter
    (no ``--python``, and no other virtualenv active: ``tools.runner.interpreter.default_python``) and with
    no variables of the user's (``--env``: ``tools.runner.warm.cold_reason``)."""
    from tools.runner.interpreter import default_python

    return python is None and not env and default_python() == sys.executable


def seed_of(words: list[str]) -> int | None:
    """The seed of a ``migrate`` command line's runs (``words``: what follows ``ferry``), when the words
    show that its runs start warm; None where they do not, or where only the parser can tell (an
    abbreviated option, a seed that is not a plain number in range, ``--help``)."""
    seed = 0
    rest = iter(words)
    for word in rest:
        if word == "--":
            break  # what follows is positional
        if word in ("-h", "--help") or word.startswith("--help="):
            return None
        if not word.startswith("--"):
            continue  # the path, an option's value, -v
        name, eq, value = word.partition("=")
        if name in ("--python", "--env"):
            return None
        if name == "--seed":
            value = value if eq else next(rest, "")
            if not value.isdigit() or int(value) > SEED_MAX:
                return None
            seed = int(value)
        elif any(flag.startswith(name) for flag in FLAGS_READ):
            return None  # an abbreviation argparse may expand to one of them
    return seed


def warm_first(words: list[str]) -> bool:
    """Start the warm interpreter for the ``migrate`` command line ``words`` (after ``ferry``) where it is
    certain to be the one its runs fork from; True when one is (now) starting."""
    seed = seed_of(words)
    if seed is None or not runs_start_warm(None, None):
        return False
    from agent.migration.adapters import side_by_side_env
    from tools.runner import warm

    return warm.prewarm(seed=seed, caller_env=side_by_side_env(), user_env={})
