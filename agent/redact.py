r"""Credentials out of what Ferry prints: one redaction for every form a database address can take.

A Postgres address carries its secrets in three places: the user-info of a URL
(``postgresql://user:SECRET@host/db``), its query string (``?password=SECRET``; libpq decodes the
keys too, so ``?pass%77ord=`` is a password: the whole query is hidden, ``?***``), and libpq's
``key=value`` form (``host=h password=SECRET``, quoted values and backslash escapes such as
``SEC\ RET`` included; keys named ``*pass*``, ``*secret*``, ``*token*``). :func:`redact_dsn` hides all three;
:func:`scrub` also takes those secrets out of any other text (a driver's error quoting its input).
Over-redaction is accepted: a value is hidden whenever it might be a secret.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

HIDDEN = "***"
_SECRET_KEY = r"[A-Za-z0-9_.-]*(?:pass|secret|token)[A-Za-z0-9_.-]*"
_QUERY = re.compile(rf"(?i)(?P<key>{_SECRET_KEY})(?P<eq>\s*=\s*)(?P<value>[^&#;\s]*)")
_KEYVALUE = re.compile(rf"(?i)(?P<key>{_SECRET_KEY})(?P<eq>\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'?|(?:\\.|[^\s\\])*)")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_INLINE_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*):[^\s@]*@")


def _userinfo(url: str) -> tuple[str, str | None]:
    """``url`` with the password of its user-info hidden, and that password (None when it has none)."""
    m = _SCHEME.match(url)
    if m is None:
        return url, None
    head, rest = url[:m.end()], url[m.end():]
    at = rest.rfind("@")  # the last '@': a password may hold '@' (then the host part follows the last)
    if at < 0:
        return url, None
    creds, host = rest[:at], rest[at + 1:]
    user, colon, password = creds.partition(":")
    if not colon:
        return url, None
    return f"{head}{user}:{HIDDEN}@{host}", password


def _query(url: str) -> tuple[str, str]:
    """A URL split before its query string (``?`` and after, fragment included; '' when none)."""
    q = url.find("?")
    return (url, "") if q < 0 else (url[:q], url[q:])


def redact_dsn(dsn: str) -> str:
    """``dsn`` (a URL or a libpq ``key=value`` string) with every credential in it replaced by ``***``."""
    text, _ = _userinfo(dsn.strip())
    if _SCHEME.match(text):
        head, query = _query(text)
        return f"{head}?{HIDDEN}" if query.strip("?#") else head
    return _KEYVALUE.sub(lambda m: f"{m['key']}{m['eq']}{HIDDEN}" if m["value"] else m[0], text)


def secrets_of(dsn: str) -> set[str]:
    """The secret values ``dsn`` holds, as written and percent-decoded (for :func:`scrub`)."""
    found: set[str] = set()
    text = dsn.strip()
    _, password = _userinfo(text)
    if password:
        found.add(password)
    if _SCHEME.match(text):
        _, query = _query(text)
        for pair in query.lstrip("?").split("&"):  # libpq keeps a "#" or ";" in the value
            _, eq, value = pair.partition("=")
            if eq and value:
                found.add(value)
    else:
        for m in _KEYVALUE.finditer(text):
            value = m["value"]
            if len(value) >= 2 and value[0] == value[-1] == "'":
                value = value[1:-1]
            if value:
                found |= {value, re.sub(r"\\(.)", r"\1", value)}  # as written, and as libpq reads it
    return found | {unquote(v) for v in found} - {""}


def scrub(text: str, dsn: str | None) -> str:
    """``text`` with every secret of ``dsn`` (and any credential-shaped ``key=value``) hidden."""
    if dsn:
        for secret in sorted(secrets_of(dsn), key=len, reverse=True):
            text = text.replace(secret, HIDDEN)
    out = _INLINE_USERINFO.sub(lambda m: f"{m['head']}:{HIDDEN}@", text)
    return _QUERY.sub(lambda m: f"{m['key']}{m['eq']}{HIDDEN}" if m["value"] else m[0], out)


# --- what a remote user may read: the documents that ship with Ferry, no server paths ----------------------

#: design documents a user's copy of Ferry does not have -> the page of docs/ that says it in Ferry's words
_SHIPPED = {"CUDA_IDIOMS": "docs/idioms.md", "NUMERICS": "docs/numerics.md", "DESIGN": "docs/design.md"}
_DESIGN_DOC = re.compile(r"(?:docs/)?\b(CUDA_IDIOMS|NUMERICS|DESIGN)\.md\b")


def shipped_docs(text: str) -> str:
    """``text`` with each citation of a design document (CUDA_IDIOMS.md, NUMERICS.md, DESIGN.md) replaced by
    the docs/ page that ships with Ferry (docs/idioms.md, docs/numerics.md, docs/design.md)."""
    return _DESIGN_DOC.sub(lambda m: _SHIPPED[m.group(1)], text)


def server_paths(text: str, names: dict[str, str]) -> str:
    """``text`` with each server path of ``names`` (a workspace, the session's repository copy, the data
    dir) replaced by what the user calls it (``""``: the repository's root, so ``<ws>/train.py`` reads
    ``train.py``); the longest path first, so a path inside another is named by the inner one."""
    for path in sorted((p.rstrip("/") for p in names if p.rstrip("/")), key=len, reverse=True):
        name = names.get(path, names.get(path + "/", ""))
        text = text.replace(path + "/", f"{name}/" if name else "")
        bare = (name or ".").replace("\\", "\\\\")
        text = re.sub(re.escape(path) + r"(?![\w.-])", bare, text)
    return text
