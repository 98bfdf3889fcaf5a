"""Where tpx's compiled C++ extension is cached, computed without importing torch.

``backend._ext`` builds and loads the extension; this module only names the cache: a digest of
the C++ sources, the installed torch's version (read from its package metadata, so no
``import torch``) and the Python version, under ``$TPX_EXTENSION_DIR``, ``~/.cache/ferry/tpx-ext``
or a per-user temp dir. The runner uses it to find the built extension on the host in
microseconds instead of starting an interpreter that imports torch.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import sys
import tempfile
from pathlib import Path

_CSRC = Path(__file__).resolve().parent.parent / "backend" / "csrc"
SOURCES = [_CSRC / "tpx_ext.cpp", _CSRC / "tpx_dispatch.cpp"]


def torch_version() -> str:
    """The installed torch's version string (``2.13.0+cpu``), as ``torch.__version__`` gives it."""
    mod = sys.modules.get("torch")
    if mod is not None and getattr(mod, "__version__", None):
        return str(mod.__version__)
    return importlib.metadata.version("torch")


def source_hash() -> str:
    h = hashlib.sha256()
    for src in SOURCES:
        h.update(src.read_bytes())
    h.update(torch_version().encode())
    h.update(sys.version.encode())
    return h.hexdigest()[:16]


def candidate_dirs(digest: str) -> list[Path]:
    dirs: list[Path] = []
    override = os.environ.get("TPX_EXTENSION_DIR")
    if override:
        dirs.append(Path(override) / digest)
    else:
        try:
            dirs.append(Path.home() / ".cache" / "ferry" / "tpx-ext" / digest)
        except RuntimeError:  # no HOME and no passwd entry (some sandboxes)
            pass
    dirs.append(Path(tempfile.gettempdir()) / f"ferry-tpx-ext-{os.getuid()}" / digest)
    return dirs


def built_library(d: Path) -> Path | None:
    """The shared object a finished build left in ``d`` (named by its READY file), or None."""
    try:
        so = d / (d / "READY").read_text().strip()
    except OSError:
        return None
    return so if so.suffix == ".so" and so.is_file() else None


def cached_library() -> Path | None:
    """The already-built extension for these sources, if any cache dir holds one."""
    digest = source_hash()
    for d in candidate_dirs(digest):
        so = built_library(d)
        if so is not None:
            return so
    return None
