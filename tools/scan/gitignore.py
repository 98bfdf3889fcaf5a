"""A small .gitignore matcher, used when the scanned folder is not inside a git work tree
(inside one, ``git ls-files --exclude-standard`` is authoritative)."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from tools import repofiles

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool
    base: str  # folder of the .gitignore, relative to the root ('' for the root)


def _translate(pattern: str) -> str:
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("/.*")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1:j].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = j
        elif c == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def parse(text: str, base: str = "") -> list[_Pattern]:
    patterns = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        anchored = "/" in line
        line = line.lstrip("/")
        body = _translate(line)
        regex = re.compile(("^" if anchored else "^(?:.*/)?") + body + "$")
        patterns.append(_Pattern(regex, negate, dir_only, base))
    return patterns


class IgnoreRules:
    """Accumulates .gitignore files found while walking; answers ``ignored(rel, is_dir)``."""

    def __init__(self) -> None:
        self.patterns: list[_Pattern] = []

    def add_file(self, path: Path, base: str) -> None:
        try:  # the repository's own file: a FIFO never blocks, a link is not followed
            data = repofiles.read_bytes(path.parent, path.name, max_bytes=repofiles.MAX_REPO_FILE_BYTES, head=True)
        except repofiles.RepoFileError as exc:
            if exc.kind != "missing":
                logger.warning("cannot read %s: %s", path, exc.reason)
            return
        self.patterns.extend(parse(data.decode("utf-8", errors="replace"), base))

    def ignored(self, rel: str, is_dir: bool) -> bool:
        result = False
        for p in self.patterns:
            if p.base:
                if not rel.startswith(p.base + "/"):
                    continue
                sub = rel[len(p.base) + 1:]
            else:
                sub = rel
            if p.dir_only and not is_dir:
                continue
            if p.regex.match(sub):
                result = not p.negate
        return result
