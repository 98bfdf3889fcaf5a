"""Usage errors that say what to do: a mistyped command (``ferry migrat``) names the close ones, and
a command given unquoted to an option that takes one (``--run python train.py --steps 8``) is
answered with the quoted form and the sub-command's own usage, not the top-level one."""

from __future__ import annotations

import argparse
import difflib
import shlex

#: the metavar of the options whose value is a whole command line (--run, --test)
COMMAND_METAVAR = "CMD"


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The sub-command parsers of ``parser`` by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def innermost(sub: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The deepest sub-command parser ``argv`` names below ``sub`` (``ferry bot sweep``: the sweep's)."""
    nested = subcommands(sub)
    for word in argv:
        if word in nested:
            return innermost(nested[word], argv[argv.index(word) + 1:])
    return sub


def command_word(argv: list[str]) -> str | None:
    """The sub-command as typed: the first word that is not an option (the top-level options,
    ``-v``/``--verbose``/``-h``, take no value)."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word
    return None


def unknown_command(word: str, names: list[str]) -> str:
    """The error for a sub-command that does not exist, naming the closest ones."""
    close = difflib.get_close_matches(word, names, n=3, cutoff=0.6)
    if close:
        return f"unknown command {word!r}; did you mean {' or '.join(repr(c) for c in close)}?"
    return f"unknown command {word!r}; the commands are: {', '.join(names)} (ferry --help says what each does)"


def _quoted(words: list[str]) -> str:
    text = " ".join(words)
    return f'"{text}"' if not any(c in text for c in '"$`\\!') else shlex.quote(text)


def unquoted_command_hint(sub: argparse.ArgumentParser, argv: list[str], extras: list[str]) -> str | None:
    """When ``extras`` (the words argparse did not recognise) are the rest of a command given to
    ``--run``/``--test`` without quotes, the sentence that says how to quote it; else None."""
    if not extras:
        return None
    flags = [s for a in sub._actions if a.metavar == COMMAND_METAVAR for s in a.option_strings if s.startswith("--")]
    for i, word in enumerate(argv[:-1]):
        if word not in flags:
            continue
        # the words after the option's value, up to the next option the sub-command knows
        rest = argv[i + 2:]
        n = 0
        while n < len(rest) and rest[n] in extras and rest[n] not in sub._option_string_actions:
            n += 1
        if n and rest[0] == extras[0]:
            whole = [argv[i + 1], *rest[:n]]
            return (f"{word} takes the whole command as one argument: quote it, "
                    f"{word} {_quoted(whole)}")
    return None


def usage_error(sub: argparse.ArgumentParser, message: str) -> str:
    """A sub-command's usage followed by ``message``, as argparse prints its own errors."""
    return f"{sub.format_usage()}{sub.prog}: error: {message}\n"
