"""Finding the user's source line: the first stack frame inside the user's repository."""

from __future__ import annotations

import linecache
import os
import sys
import sysconfig
from pathlib import Path
from types import FrameType

_OWN_DIRS = tuple(str(Path(__file__).resolve().parents[1] / d) + os.sep for d in ("profile", "probe"))
_LIB_DIRS = tuple({sysconfig.get_paths()[k] + os.sep for k in ("stdlib", "purelib", "platlib")})


class OwnFrame(Exception):
    """The call came from Ferry's own probe or profiler (its copies of tensors), not from the user's code."""


class FrameFinder:
    """Maps the current stack to ``(relative file, line, function, source)`` in the user's repo;
    raises :class:`OwnFrame` when a frame of the probe or profiler comes first (their own copies are
    no work of the program's)."""

    def __init__(self, repo_root: Path) -> None:
        self.root = str(Path(repo_root).resolve()) + os.sep
        self._cache: dict[str, str] = {}  # filename -> "user" | "own" | "other"

    def _kind(self, filename: str) -> str:
        kind = self._cache.get(filename)
        if kind is None:
            try:
                path = str(Path(filename).resolve())
            except (OSError, RuntimeError):
                path = filename
            if path.startswith(_OWN_DIRS) or filename.startswith(_OWN_DIRS):
                kind = "own"
            elif path.startswith(self.root) and not path.startswith(_LIB_DIRS) and "site-packages" not in path:
                kind = "user"
            else:
                kind = "other"
            self._cache[filename] = kind
        return kind

    def is_user_file(self, filename: str) -> bool:
        return self._kind(filename) == "user"

    def user_frame(self, skip: int = 2) -> tuple[str, int, str, str] | None:
        frame: FrameType | None = sys._getframe(skip)
        while frame is not None:
            filename = frame.f_code.co_filename
            kind = self._kind(filename)
            if kind == "own":
                raise OwnFrame(filename)
            if kind == "user":
                rel = os.path.relpath(str(Path(filename).resolve()), self.root)
                line = frame.f_lineno
                return rel, line, frame.f_code.co_name, linecache.getline(filename, line).strip()
            frame = frame.f_back
        return None
