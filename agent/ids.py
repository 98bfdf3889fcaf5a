"""Ids that become names on disk: migration, session, job and delivery ids are plain names.

Every id Ferry accepts (``ferry migrate --id``, ``ferry resume ID``, the service's path parameters,
GitHub's ``X-GitHub-Delivery`` header) or derives is checked here before it names a directory: a
letter or digit, then letters, digits, ``.``, ``_`` or ``-``, at most :data:`MAX_ID` characters, and
never ``..``. So an id can neither climb out of the state directory (``../x``, ``/abs``, ``a/b``) nor
be too long for the filesystem. :func:`inside` is the defence in depth where an id is turned into a
path: the resolved path must stay inside the directory it was joined to.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

MAX_ID = 128
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
ID_RULE = (f"an id is a plain name: a letter or digit, then letters, digits, '.', '_' or '-', at most {MAX_ID} "
           "characters, no '..'")


class InvalidId(ValueError):
    """An id that is not a plain name; the message says which and what an id may hold."""


def id_problem(value: object) -> str | None:
    """Why ``value`` cannot be an id, or None when it is a plain name."""
    if not isinstance(value, str) or not value:
        return "it is empty"
    if len(value) > MAX_ID:
        return f"it is {len(value)} characters long"
    if not ID_PATTERN.fullmatch(value):
        return "it holds characters other than letters, digits, '.', '_' and '-', or does not start with a " \
               "letter or digit"
    if ".." in value:
        return "it holds '..'"
    return None


def check_id(value: object, what: str = "migration id") -> str:
    """``value`` when it is a plain name; :class:`InvalidId` naming ``what`` otherwise."""
    problem = id_problem(value)
    if problem is not None:
        shown = repr(value[:60] + "...") if isinstance(value, str) and len(value) > 60 else repr(value)
        raise InvalidId(f"{what} {shown} is refused: {problem}; {ID_RULE}")
    assert isinstance(value, str)
    return value


def inside(root: str | os.PathLike[str], *names: str, what: str = "migration id") -> Path:
    """``root/names...`` after checking each name is a plain id and the resolved result stays inside
    ``root`` (a link planted under ``root`` that leads out is refused too)."""
    base = Path(root).expanduser()
    path = base.joinpath(*(check_id(n, what) for n in names))
    real_base = Path(os.path.realpath(base))
    real = Path(os.path.realpath(path))
    if real != real_base and real_base not in real.parents:
        raise InvalidId(f"{what} {names[-1]!r} leads outside {base} (to {real}); refused")
    return path
