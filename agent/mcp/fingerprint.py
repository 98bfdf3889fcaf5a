"""A repository tree's fingerprint: what decides whether a verdict still covers the files as they are now.

The same files the service copies into a session (regular files; ``.git`` and ``__pycache__`` left out;
links never followed), each by its relative path and its bytes.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

SKIP_DIRS = frozenset({".git", "__pycache__"})


def tree_fingerprint(root: Path) -> str:
    """sha256 over the sorted (relative path, content) of the regular files under ``root``; a tree that cannot
    be read fingerprints as the reason, so it never equals a readable one."""
    digest = hashlib.sha256()
    try:
        entries: list[tuple[str, Path]] = []
        for folder, dirs, files in os.walk(root, followlinks=False):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            for name in files:
                path = Path(folder) / name
                if stat.S_ISREG(path.lstat().st_mode):
                    entries.append((path.relative_to(root).as_posix(), path))
        for rel, path in sorted(entries):
            digest.update(rel.encode("utf-8", "surrogateescape") + b"\0")
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(chunk)
            digest.update(b"\0")
    except OSError as exc:
        return f"unreadable: {exc}"
    return digest.hexdigest()
