"""Patch builder: a unified diff between the original repo and the migrated text, `git apply`-able.

Only source files take part (by suffix, outside caches, virtualenvs and VCS folders): run
artefacts such as checkpoints, probe dumps, logs and ``__pycache__`` never reach the patch.
"""

from __future__ import annotations

import difflib
import logging
import os
import stat
import subprocess
from pathlib import Path

from pydantic import BaseModel, Field

from tools import repofiles

logger = logging.getLogger(__name__)

SOURCE_SUFFIXES = frozenset(
    {".py", ".pyi", ".cfg", ".toml", ".ini", ".txt", ".md", ".rst", ".yaml", ".yml", ".json", ".sh", ".ipynb"}
)
SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", "__pycache__", ".venv", "venv", "env", ".tox", ".nox", ".mypy_cache",
     ".pytest_cache", ".ruff_cache", "node_modules", "build", "dist", ".ferry", ".eggs"}
)
MAX_SOURCE_BYTES = repofiles.MAX_REPO_FILE_BYTES


class FileChange(BaseModel):
    path: str = Field(description="path relative to the repo root, '/'-separated")
    change: str = Field(description="modified, added or deleted")
    added_lines: int
    removed_lines: int


class Patch(BaseModel):
    diff: str = Field(description="unified diff with a/ b/ prefixes; empty when nothing changed")
    files: list[FileChange] = Field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.diff


class PatchRequest(BaseModel):
    original: Path = Field(description="the original repository root")
    files: dict[str, str | None] = Field(
        description="relative path -> new text (None deletes the file); others are unchanged"
    )


def is_source_file(rel: str) -> bool:
    parts = Path(rel).parts
    if any(p in SKIP_DIRS or p.endswith(".egg-info") for p in parts[:-1]):
        return False
    return Path(rel).suffix in SOURCE_SUFFIXES


def list_source_files(root: Path) -> list[str]:
    """Relative paths ('/'-separated) of the source files under ``root``, sorted: regular files only (a
    symlink, a FIFO or a device named like a source file is skipped, the special ones with a warning) of at
    most MAX_SOURCE_BYTES. Symlinked directories are not entered."""
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in filenames:
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if not is_source_file(rel):
                continue
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                logger.warning("skipping %s: not a regular file (a FIFO, socket or device is never read)", rel)
                continue
            if st.st_size <= MAX_SOURCE_BYTES:
                out.append(rel)
    return sorted(out)


def read_text(path: Path, root: Path | None = None) -> str | None:
    """The UTF-8 text of a repository file, or None when it cannot be one (missing, not UTF-8, a link, a FIFO
    or device, too large): read by :mod:`tools.repofiles`, never blocking and never through a link (below
    ``root`` when given, else at the file itself)."""
    try:
        base, rel = repofiles.split(path, root)
    except repofiles.RepoFileError:
        return None
    return repofiles.read_text_or_none(base, rel)


def file_diff(rel: str, old: str | None, new: str | None) -> str:
    """The unified diff of one file (git style, a/ b/ prefixes), '' when unchanged."""
    if old == new:
        return ""
    old_lines = (old or "").splitlines(keepends=True)
    new_lines = (new or "").splitlines(keepends=True)
    header = [f"diff --git a/{rel} b/{rel}\n"]
    if old is None:
        header.append("new file mode 100644\n")
    elif new is None:
        header.append("deleted file mode 100644\n")
    fromfile = "/dev/null" if old is None else f"a/{rel}"
    tofile = "/dev/null" if new is None else f"b/{rel}"
    body: list[str] = []
    for line in difflib.unified_diff(old_lines, new_lines, fromfile, tofile, n=3):
        if line.startswith(("---", "+++")):
            body.append(line if line.endswith("\n") else line + "\n")
            continue
        if line.endswith("\n"):
            body.append(line)
        else:  # last line of a file without a trailing newline
            body.append(line + "\n")
            body.append("\\ No newline at end of file\n")
    if not body:
        return ""
    return "".join(header + body)


def _count(diff: str) -> tuple[int, int]:
    added = sum(1 for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---"))
    return added, removed


def build_patch(req: PatchRequest) -> Patch:
    """The patch that turns ``req.original`` into the original plus ``req.files``."""
    chunks: list[str] = []
    changes: list[FileChange] = []
    for rel in sorted(req.files):
        if not is_source_file(rel):
            logger.debug("patch: skipping non-source file %s", rel)
            continue
        old = read_text(req.original / rel, req.original) if (req.original / rel).is_file() else None
        new = req.files[rel]
        diff = file_diff(rel, old, new)
        if not diff:
            continue
        chunks.append(diff)
        added, removed = _count(diff)
        kind = "added" if old is None else "deleted" if new is None else "modified"
        changes.append(FileChange(path=rel, change=kind, added_lines=added, removed_lines=removed))
    return Patch(diff="".join(chunks), files=changes)


def diff_trees(original: Path, workspace: Path) -> Patch:
    """The patch between two trees, source files only (run artefacts are never included)."""
    before = set(list_source_files(original))
    after = set(list_source_files(workspace))
    files: dict[str, str | None] = {}
    for rel in sorted(before | after):
        new = read_text(workspace / rel, workspace) if rel in after else None
        old = read_text(original / rel, original) if rel in before else None
        if new != old:
            files[rel] = new
    return build_patch(PatchRequest(original=original, files=files))


def git_apply(repo: Path, diff: str, *, check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run ``git apply`` (works outside git repositories too); raises CalledProcessError on failure."""
    cmd = ["git", "apply", "--whitespace=nowarn"] + (["--check"] if check else []) + ["-"]
    return subprocess.run(cmd, cwd=repo, input=diff, text=True, capture_output=True, check=True)
