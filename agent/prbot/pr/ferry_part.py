"""Ferry's part of a pull request's body: the text between two HTML comments (invisible on GitHub), so
Ferry rewrites its own text and keeps what a person wrote above or below it.

A body without the markers (a pull request opened before they existed, or whose person removed them)
is Ferry's whole: it is edited in place, never wrapped around a person's words.
"""

from __future__ import annotations

import shlex

BEGIN = "<!-- ferry:begin: Ferry rewrites the text up to ferry:end; write your own above or below -->"
END = "<!-- ferry:end -->"
ATTEMPT_BEGIN = "<!-- ferry:attempt -->"
ATTEMPT_END = "<!-- /ferry:attempt -->"
_BEGIN_PREFIX = "<!-- ferry:begin"


def marked(text: str) -> str:
    """``text`` as Ferry's part of a body."""
    return f"{BEGIN}\n{text.rstrip()}\n{END}\n"


def split(body: str) -> tuple[str, str, str] | None:
    """(a person's text before, Ferry's part without its markers, a person's text after); None: no markers."""
    start = body.find(_BEGIN_PREFIX)
    if start < 0:
        return None
    inner = body.find("\n", start)
    end = body.find(END, inner if inner >= 0 else start)
    if inner < 0 or end < 0:
        return None
    return body[:start], body[inner + 1:end], body[end + len(END):]


def merged(old: str | None, ferry: str) -> str:
    """``ferry`` (a marked text) in place of the Ferry part of ``old``: what a person wrote outside the
    markers is kept; an old body without markers is replaced whole."""
    parts = split(old or "")
    if parts is None:
        return ferry
    before, _, after = parts
    new = split(ferry)
    inner = new[1] if new is not None else ferry
    return f"{before}{BEGIN}\n{inner.rstrip()}\n{END}{after}"


def with_attempt(body: str, section: str, status_line: str, run: str, test: str | None) -> str:
    """``body`` describing a later attempt on its branch: its ``**Status:**`` line says the attempt's verdict,
    its ``ferry pr`` line names the attempt's commands, and ``section`` (the attempt: commands, verdict,
    commits) replaces the one an earlier attempt left, before ``## Reproduce``. Only Ferry's part changes."""
    parts = split(body)
    before, inner, after = parts if parts is not None else ("", body, "")
    lines = _without_attempt(inner.splitlines())
    lines = [status_line if ln.startswith("**Status:** ") else _commands(ln, run, test) for ln in lines]
    block = [ATTEMPT_BEGIN, *section.rstrip().splitlines(), ATTEMPT_END, ""]
    at = next((i for i, ln in enumerate(lines) if ln.strip() == "## Reproduce"), len(lines))
    text = "\n".join(lines[:at] + block + lines[at:]).rstrip() + "\n"
    if parts is None:
        return text
    return f"{before}{BEGIN}\n{text}{END}{after}"


def _without_attempt(lines: list[str]) -> list[str]:
    if ATTEMPT_BEGIN not in lines:
        return lines
    start = lines.index(ATTEMPT_BEGIN)
    end = lines.index(ATTEMPT_END, start) if ATTEMPT_END in lines[start:] else start
    rest = lines[end + 1:]
    return lines[:start] + (rest[1:] if rest and not rest[0].strip() else rest)


def _commands(line: str, run: str, test: str | None) -> str:
    """A reproduce line (``ferry pr ...``) with ``--run`` and ``--test`` set to the attempt's."""
    if not line.startswith("ferry pr "):
        return line
    try:
        words = shlex.split(line)
    except ValueError:
        return line
    for flag, value in (("--run", run), ("--test", test)):
        if value is None:
            continue
        if flag in words[:-1]:
            words[words.index(flag) + 1] = value
        else:
            words += [flag, value]
    return shlex.join(words)
