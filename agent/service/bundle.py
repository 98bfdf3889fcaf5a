"""Directories carried between the service and a Ray worker as one tar.gz: the session's repository copy
on the way there, an attempt's outputs and run artifacts on the way back.

Each directory travels under its own top-level name, beside a ``BUNDLE`` marker (so the unpacker never
takes a lone directory for an archive's wrapper). Only regular files are packed (links and special files
are left out), at most ``limit`` bytes of them. Unpacking goes through :func:`uploads.extract_archive`:
what comes back from a worker is treated like an upload (no links, no absolute or ``..`` names, no
special files, files, bytes and ratio capped while writing), and a name that is not one of the expected
top-level directories is refused.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from agent.service.archive import regular_files
from agent.service.uploads import SourceRefused, UploadLimits, extract_archive

MARKER = "BUNDLE"


class BundleTooLarge(ValueError):
    """The directories hold more than the bundle may carry."""


def pack(dirs: Mapping[str, Path], limit: int) -> bytes:
    """``dirs`` (top-level name -> directory; a missing one is left out) as tar.gz bytes."""
    buf = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        marker = tarfile.TarInfo(MARKER)
        marker.size, marker.mode = 0, 0o644
        tar.addfile(marker, io.BytesIO(b""))
        for name, root in dirs.items():
            if not root.is_dir():
                continue
            for rel in regular_files(root):
                try:
                    fd = os.open(root / rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                except OSError:
                    continue  # gone since the walk
                with os.fdopen(fd, "rb") as f:
                    st = os.fstat(f.fileno())
                    if not stat.S_ISREG(st.st_mode):
                        continue
                    total += st.st_size
                    if total > limit:
                        raise BundleTooLarge(f"{name} holds more than {limit} bytes")
                    info = tarfile.TarInfo(f"{name}/{rel}")
                    info.size, info.mode = st.st_size, 0o755 if st.st_mode & 0o111 else 0o644
                    tar.addfile(info, f)
    return buf.getvalue()


def unpack(data: bytes, dest: Path, names: Iterable[str], limits: UploadLimits) -> dict[str, Path]:
    """Unpack bundle bytes into ``dest`` (an empty directory); the directories it holds, by name (only the
    ``names`` expected). SourceRefused when it is not a bundle of those, or breaks ``limits``."""
    allowed = set(names)
    with tempfile.NamedTemporaryFile(prefix=".ferry-bundle-", dir=dest.parent, delete=False) as fh:
        fh.write(data)
        tmp = Path(fh.name)
    try:
        extract_archive(tmp, dest, limits)
    finally:
        tmp.unlink(missing_ok=True)
    found: dict[str, Path] = {}
    for child in dest.iterdir():
        if child.name == MARKER and child.is_file():
            continue
        if child.name not in allowed or not child.is_dir() or child.is_symlink():
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir()
            raise SourceRefused(f"the bundle holds {child.name!r}, not one of {sorted(allowed)}")
        found[child.name] = child
    return found
