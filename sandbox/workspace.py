"""Private copy-on-write copies of a repository: the original is never written.

``cp --reflink=auto`` clones file extents where the filesystem supports it (btrfs, xfs,
bcachefs, overlay on those) and falls back to a plain copy elsewhere (ext4). Hard links into
the original are never made, so no write in the copy can reach the original.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

logger = logging.getLogger(__name__)

FICLONE = 0x40049409  # linux/fs.h _IOW(0x94, 9, int)
WORKSPACE_ROOT_ENV = "FERRY_WORKSPACE_ROOT"


class WorkspaceError(RuntimeError):
    """The repository cannot be copied (missing, not a directory, copy failed)."""


@dataclass
class Workspace:
    """A private copy of ``source`` at ``path``; ``container`` is the temp dir holding it."""

    source: Path
    path: Path
    container: Path
    method: str  # "reflink" (copy-on-write clones) or "copy" (plain bytes)
    owner_uid: int | None = None

    def chown(self, uid: int) -> None:
        """Hand the copy to the sandbox uid (the child runs unprivileged when Ferry is root)."""
        _chown_tree(self.path, uid)
        os.chmod(self.container, 0o755)
        self.owner_uid = uid

    def cleanup(self) -> None:
        shutil.rmtree(self.container, ignore_errors=True)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def _chown_tree(path: Path, uid: int) -> None:
    os.lchown(path, uid, uid)
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, uid)


@lru_cache(maxsize=16)
def reflink_supported(directory: str) -> bool:
    """Whether FICLONE works between files in ``directory`` (probed once per directory)."""
    try:
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            src = Path(tmp, "a")
            src.write_bytes(b"ferry")
            with open(src, "rb") as fsrc, open(Path(tmp, "b"), "wb") as fdst:
                fcntl.ioctl(fdst.fileno(), FICLONE, fsrc.fileno())
        return True
    except OSError:
        return False


def default_root() -> Path:
    return Path(os.environ.get(WORKSPACE_ROOT_ENV) or tempfile.gettempdir())


def create_workspace(src: Path, root: Path | None = None) -> Workspace:
    """Copy ``src`` into a new private directory under ``root`` (default: temp dir)."""
    src = Path(src).expanduser()
    if not src.exists():
        raise WorkspaceError(f"repository path {src} does not exist")
    if not src.is_dir():
        raise WorkspaceError(f"repository path {src} is not a directory; pass the repo's root folder")
    src = src.resolve()
    root = Path(root) if root is not None else default_root()
    root.mkdir(parents=True, exist_ok=True)
    container = Path(tempfile.mkdtemp(prefix="ferry-ws-", dir=root))
    dest = container / (src.name or "repo")
    method = "reflink" if reflink_supported(str(container)) else "copy"
    cp = shutil.which("cp")
    try:
        if cp:
            # -a keeps symlinks as symlinks (never follows them out of the repo), modes and
            # times; hard links only between files of the copy itself.
            proc = subprocess.run(
                [cp, "-a", "--reflink=auto", "--no-preserve=ownership", "--", str(src), str(dest)],
                capture_output=True, text=True,
            )
            if proc.returncode != 0:
                raise WorkspaceError(f"copying {src} failed: {proc.stderr.strip()}")
        else:  # pragma: no cover - coreutils is everywhere we run
            shutil.copytree(src, dest, symlinks=True)
            method = "copy"
    except BaseException:
        shutil.rmtree(container, ignore_errors=True)
        raise
    logger.debug("workspace %s -> %s (%s)", src, dest, method)
    return Workspace(source=src, path=dest, container=container, method=method)
