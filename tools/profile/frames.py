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


class FrameFinder:
    """Maps the current stack to ``(relative file, line, function, source)`` in the user's repo."""

    def __init__(self, repo_root: Path) -> None:
        self.root = str(Path(repo_root).resolve()) + os.sep
        self._cache: dict[str, bool] = {}

    def is_user_file(self, filename: str) -> bool:
        ok = self._cache.get(filename)
        if ok is None:
            try:
                path = str(Path(filename).resolve())
            except (OSError, RuntimeError):
                path = filename
            ok = (path.startswith(self.root) and not path.startswith(_LIB_DIRS) and not path.startswith(_OWN_DIRS)
                  and "site-packages" not in path)
            self._cache[filename] = ok
        return ok

    def user_frame(self, skip: int = 2) -> tuple[str, int, str, str] | None:
        frame: FrameType | None = sys._getframe(skip)
        while frame is not None:
            filename = frame.f_code.co_filename
            if self.is_user_file(filename):
                rel = os.path.relpath(str(Path(filename).resolve()), self.root)
                line = frame.f_lineno
                return rel, line, frame.f_code.co_name, linecache.getline(filename, line).strip()
            frame = frame.f_back
        return None
