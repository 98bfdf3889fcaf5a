"""The tests as Ferry first saw them: what an agent's own edits are checked against before any verdict.

The first time a client names a repository (any tool), the server keeps a copy of the files that decide what
the tests check (test modules, conftest.py, pytest's configuration files) in its data dir, out of the
repository's reach. Before ``migrate`` starts, the repository's current files are compared with that copy by
the same test guard as Ferry's own edits (:mod:`tools.guard`): a removed test, an added skip, fewer
assertions, a looser tolerance, a swallowed assertion or a collection change refuses the migration
(``guard_refused``). Only a person accepts such a change: ``ferry mcp --accept-tests PATH`` records the
repository's tests as they are now.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from pathlib import Path, PurePosixPath

from tools.guard.models import FileEdit, GuardRequest, GuardResult
from tools.guard.static import check_patch, is_test_module

logger = logging.getLogger(__name__)

CONFIG_FILES = frozenset({"conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"})
SKIP_DIRS = frozenset({".git", "__pycache__", ".venv", "venv", "node_modules", ".tox"})
MAX_FILE_BYTES = 2_000_000
MAX_FILES = 5000


def guarded(rel: str) -> bool:
    """Whether a repository file decides what its tests check."""
    return PurePosixPath(rel).name in CONFIG_FILES or is_test_module(rel)


def tests_of(repo: Path) -> dict[str, str]:
    """The guarded files of ``repo`` (relative path -> text); links are never followed, big or binary files
    left out."""
    out: dict[str, str] = {}
    for folder, dirs, files in os.walk(repo, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            path = Path(folder) / name
            rel = path.relative_to(repo).as_posix()
            if not guarded(rel):
                continue
            try:
                info = path.lstat()
                if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
                    continue
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, "rb") as fh:
                    out[rel] = fh.read().decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if len(out) >= MAX_FILES:
                return out
    return out


def _path(store: Path, repo: Path) -> Path:
    return store / "baselines" / f"{hashlib.sha256(str(repo).encode()).hexdigest()[:32]}.json"


def load(store: Path, repo: Path) -> dict[str, str] | None:
    """The baseline kept for ``repo`` (None: none, or one that cannot be read back as written)."""
    try:
        data = json.loads(_path(store, repo).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files = data.get("files") if isinstance(data, dict) and data.get("repo") == str(repo) else None
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return None
    return files


def record(store: Path, repo: Path, *, replace: bool = False) -> bool:
    """Keep ``repo``'s tests as its baseline unless one is kept already (``replace``: a person accepted the
    tests as they are now); True when one was written."""
    target = _path(store, repo)
    if not replace and load(store, repo) is not None:
        return False
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps({"repo": str(repo), "files": tests_of(repo)}), encoding="utf-8")
    os.replace(tmp, target)
    logger.info("MCP: the tests of %s kept as the baseline its edits are checked against", repo)
    return True


def check(store: Path, repo: Path) -> GuardResult:
    """The test guard over the changes from the baseline to ``repo``'s files now (no baseline: nothing to
    compare, an empty result)."""
    before = load(store, repo)
    if before is None:
        return GuardResult()
    now = tests_of(repo)
    edits = [FileEdit(path=rel, before=before.get(rel), after=now.get(rel))
             for rel in sorted(set(before) | set(now)) if before.get(rel) != now.get(rel)]
    return check_patch(GuardRequest(files=edits))
