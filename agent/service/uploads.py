"""Repositories into a session: archives and allowed server paths (interim; the full checks are being written)."""

from __future__ import annotations

import shutil
import tarfile
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict


class UploadLimits(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_bytes: int = 50 * 1024**2
    max_files: int = 5000
    max_unpacked_bytes: int = 500 * 1024**2
    max_ratio: float = 100.0


class SourceRefused(ValueError):
    """What was wrong with the archive or path, and what to do."""


def extract_archive(archive: Path, dest: Path, limits: UploadLimits) -> int:
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise SourceRefused(f"expected a tar.gz or zip archive: {exc}") from exc
    return sum(1 for p in dest.rglob("*") if p.is_file())


def resolve_allowed(path: str, roots: Sequence[Path]) -> Path:
    if not roots:
        raise SourceRefused("this server allows no server paths; upload an archive or start it with --allow-root DIR")
    real = Path(path).resolve()
    if not real.is_dir() or not any(real.is_relative_to(r.resolve()) for r in roots):
        raise SourceRefused(f"{path} is not a directory under the allowed roots ({', '.join(map(str, roots))})")
    return real


def snapshot_tree(src: Path, dest: Path, limits: UploadLimits) -> int:
    shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".git", "__pycache__"))
    return sum(1 for p in dest.rglob("*") if p.is_file())
