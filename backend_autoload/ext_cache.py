"""Where tpx's compiled C++ extension is cached, computed without importing torch.

``backend._ext`` builds and loads the extension; this module only names the cache: a digest of
the C++ sources, the compiler flags they are built with (``CFLAGS``), the installed torch's version
(read from its package metadata, so no ``import torch``) and the Python version, under
``$TPX_EXTENSION_DIR``, ``~/.cache/ferry/tpx-ext`` or a per-user temp dir. The runner uses it to
find the built extension on the host in microseconds instead of starting an interpreter that
imports torch.

A cache dir is used (read or built into) only when no other uid could have written it
(``backend_autoload.ext_trust``): one that fails is skipped with a warning naming it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import re
import sys
import tempfile
from pathlib import Path

from . import ext_trust

logger = logging.getLogger(__name__)

_CSRC = Path(__file__).resolve().parent.parent / "backend" / "csrc"
SOURCES = [_CSRC / "tpx_ext.cpp", _CSRC / "tpx_dispatch.cpp", _CSRC / "tpx_fast.cpp"]
# The compiler flags the extension is built with (part of the cache key). -fno-plt: a call into
# libtorch/libc10 loads the callee's address from the GOT instead of jumping through a PLT stub
# (fewer instruction-cache lines touched per call on a path that runs once per op).
CFLAGS = ("-O2", "-fno-plt")
_LIBRARY_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,100}\.so")  # what READY may name: a file in its dir
_warned: set[str] = set()


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
    h.update(" ".join(CFLAGS).encode())
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


def _refuse(path: Path, why: str) -> None:
    text = f"{path} {why}"
    if text not in _warned:  # once per process: every ``import torch`` looks the cache up
        _warned.add(text)
        logger.warning("tpx: not loading the C++ extension from its cache: %s (another user could have "
                       "planted code there); remove it, or set TPX_EXTENSION_DIR to a directory only you "
                       "can write", text)


def built_library(d: Path) -> Path | None:
    """The shared object a finished build left in ``d`` (named by its READY file), or None.

    None too, with a warning, when ``d`` or anything above it could have been written by another
    uid (``ext_trust``), when READY names anything but a library file beside it, or when either
    file is a link or writable by others."""
    ready = d / "READY"
    if not os.path.lexists(ready):
        return None
    found = ext_trust.cache_dir_problem(d.parent, d)
    if found is not None:
        _refuse(*found)
        return None
    try:
        fd = ext_trust.open_trusted_file(ready)
    except OSError as exc:
        _refuse(ready, f"cannot be opened safely ({exc})")
        return None
    with os.fdopen(fd, "rb") as f:
        name = f.read(256).decode("utf-8", "replace").strip()
    if not _LIBRARY_NAME.fullmatch(name):
        _refuse(ready, f"names {name[:60]!r}, not a library file in its directory")
        return None
    so = d / name
    problem = ext_trust.entry_problem(so, kind="file")
    if problem is not None:
        if os.path.lexists(so):
            _refuse(so, problem)
        return None
    return so


def prepare_dir(d: Path) -> str | None:
    """Make the cache dir ``d`` (its root ``d.parent`` too) for a build, 0755 and ours; why not, or None.

    A directory that already exists must pass the same checks as one read from: a cache root or
    digest dir someone else made first is refused, never built into."""
    root = d.parent
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"{root.parent}: cannot be created ({exc.strerror or exc})"
    found = ext_trust.ancestors_problem(root)
    if found is not None:
        return f"{found[0]} {found[1]}"
    for p in (root, d):
        try:
            _make_private_dir(p)
        except OSError as exc:
            return f"{p}: cannot be created ({exc.strerror or exc})"
        problem = ext_trust.entry_problem(p, kind="dir")
        if problem is not None:
            return f"{p} {problem}"
    return None


def _make_private_dir(p: Path) -> None:
    try:
        os.mkdir(p, 0o700)
    except FileExistsError:
        return  # checked by the caller, never changed
    fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchmod(fd, 0o755)  # readable by a sandboxed child's uid, writable by us only
    finally:
        os.close(fd)


def cached_library() -> Path | None:
    """The already-built extension for these sources, if any cache dir holds one."""
    digest = source_hash()
    for d in candidate_dirs(digest):
        so = built_library(d)
        if so is not None:
            return so
    return None
