"""Call sites in the user's code, and the JSON-lines log of everything the redirect did.

Stdlib only: this runs inside the sandboxed child on every redirected call.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typing only: the sandboxed child imports no more than it needs
    from types import FrameType


_TORCH_DIR: str | None = None  # set lazily: the torch package directory
_OWN_DIR = os.path.dirname(os.path.abspath(__file__))
_FERRY_ROOT = os.path.dirname(os.path.dirname(_OWN_DIR))
_STDLIB = os.path.dirname(os.__file__)


def _torch_dir() -> str:
    global _TORCH_DIR
    if _TORCH_DIR is None:
        torch = sys.modules.get("torch")
        torch_file = getattr(torch, "__file__", None)
        _TORCH_DIR = os.path.dirname(torch_file) if torch_file else "\0"
    return _TORCH_DIR


def _is_library(filename: str) -> bool:
    return (
        filename.startswith((_torch_dir(), _OWN_DIR, _STDLIB, "<frozen", _FERRY_ROOT + "/tools/",
                             _FERRY_ROOT + "/backend/"))
        or "/site-packages/" in filename
    )


class SiteCounter:
    """Counts redirected call sites; writes each new site at once and final counts at exit."""

    def __init__(self, log_path: str | None, target: str, repo_root: str | None) -> None:
        self.log_path = log_path
        self.target = target
        self.repo_root = (repo_root.rstrip("/") + "/") if repo_root else None
        self.counts: dict[tuple[str, int, str, str], int] = {}
        self.functions: dict[tuple[str, int, str, str], str] = {}
        self._lock = threading.Lock()
        if log_path:
            atexit.register(self.flush)

    def call_site(self, skip: int = 2) -> tuple[str, int, str]:
        """(file, line, function) of the innermost frame in user code."""
        frame: FrameType | None = sys._getframe(skip)
        fallback = None
        while frame is not None:
            filename = frame.f_code.co_filename
            if self.repo_root and filename.startswith(self.repo_root):
                return filename[len(self.repo_root):], frame.f_lineno, frame.f_code.co_name
            if fallback is None and not _is_library(filename):
                fallback = (filename, frame.f_lineno, frame.f_code.co_name)
            frame = frame.f_back
        return fallback or ("<unknown>", 0, "?")

    def site_text(self, skip: int = 3) -> str:
        file, line, func = self.call_site(skip)
        return f"{file}:{line} in {func}"

    def record(self, api: str, mapped_to: str | None = None, skip: int = 3) -> None:
        file, line, func = self.call_site(skip)
        key = (file, line, api, mapped_to or self.target)
        with self._lock:
            first = key not in self.counts
            self.counts[key] = self.counts.get(key, 0) + 1
            self.functions[key] = func
        if first:
            self._write([self._entry(key, "site")])

    def _entry(self, key: tuple[str, int, str, str], event: str) -> dict[str, Any]:
        file, line, api, mapped = key
        return {"event": event, "file": file, "line": line, "function": self.functions.get(key),
                "api": api, "mapped_to": mapped, "count": self.counts[key], "pid": os.getpid()}

    def _write(self, entries: list[dict[str, Any]]) -> None:
        if not self.log_path or not entries:
            return
        data = "".join(json.dumps(e) + "\n" for e in entries).encode()
        try:
            fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as exc:  # never break the user's program over the log
            sys.stderr.write(f"ferry redirect: cannot write {self.log_path}: {exc}\n")

    def flush(self) -> None:
        with self._lock:
            entries = [self._entry(k, "final") for k in self.counts]
        self._write(entries)


class RedirectUnsupportedError(RuntimeError):
    """A CUDA-only feature with no equivalent on the target device (raised at its call site)."""
