"""Build (once) and load tpx's small C++ extension (``backend/csrc/tpx_ext.cpp``).

The extension is JIT-compiled with ``torch.utils.cpp_extension.load`` the first time tpx is
used, into a persistent cache keyed by a hash of the sources, the compiler flags
(``ext_cache.CFLAGS``), the torch version and the Python version: ``$TPX_EXTENSION_DIR`` if set,
else ``~/.cache/ferry/tpx-ext/<hash>``, else (home missing or read-only, as in the sandbox) a
per-user temp dir. Later processes load the cached shared object directly (no compiler, no
ninja). Concurrent builders (pytest workers) serialise on an ``flock`` in the cache dir, so only
one compiles and the others load its result. Nothing here downloads anything.

No code is loaded from, or built into, a cache dir another uid could write (``ext_cache`` checks
the owner and mode of every path component, ``backend_autoload.ext_trust``): a sandboxed run that
sees the host's /tmp must not be able to plant a library the host then loads. The library is
opened without following links, checked on the open file and loaded through that descriptor.
"""

from __future__ import annotations

import fcntl
import importlib
import importlib.machinery
import importlib.util
import logging
import os
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

# backend_autoload is backend's sibling: ``backend_autoload`` on the host, ``<root>.backend_autoload``
# where the bootstrap loaded this package under a private root in a user's process.
_ROOT = __name__.rpartition(".")[0].rpartition(".")[0]
ext_cache = importlib.import_module((_ROOT + "." if _ROOT else "") + "backend_autoload.ext_cache")
ext_trust = importlib.import_module((_ROOT + "." if _ROOT else "") + "backend_autoload.ext_trust")

logger = logging.getLogger(__name__)

_NAME = "tpx_ext"
_lock = threading.RLock()
_module: ModuleType | None = None
_on_load: list = []


def _writable(d: Path) -> bool:
    try:
        probe = d / f".probe-{os.getpid()}"
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        os.close(fd)
        probe.unlink()
        return True
    except OSError:
        return False


def _import_so(so: Path) -> ModuleType:
    """Load ``so`` through a descriptor opened without following links and checked on the open
    file (owner, mode), so what is loaded is what was checked."""
    fd = ext_trust.open_trusted_file(so)
    try:
        origin = f"/proc/self/fd/{fd}" if os.path.isdir("/proc/self/fd") else str(so)
        loader = importlib.machinery.ExtensionFileLoader(so.name.split(".")[0], origin)
        spec = importlib.util.spec_from_file_location(loader.name, origin, loader=loader)
        assert spec is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
    finally:
        os.close(fd)
    mod.__file__ = str(so)
    return mod


def _seal(path: Path) -> None:
    """Nobody but us may write what we built (a umask of 002 would leave it group-writable)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        os.fchmod(fd, os.fstat(fd).st_mode & 0o755)
    finally:
        os.close(fd)


def _build(d: Path) -> tuple[Path, ModuleType | None]:
    """Build into ``d`` (checked by ``ext_cache.prepare_dir``): the library, and the module when
    this process built (and so already loaded) it."""
    from torch.utils import cpp_extension

    with open(d / "build.lock", "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        try:
            so = ext_cache.built_library(d)
            if so is not None:  # another process built it while we waited
                return so, None
            # We hold the exclusive flock, so a leftover cpp_extension baton ("lock", from a
            # builder that was killed) is stale: remove it or load() would wait for it forever.
            (d / "lock").unlink(missing_ok=True)
            msg = f"tpx: compiling the C++ extension into {d} (one time, ~30-60 s)..."
            print(msg, file=sys.stderr, flush=True)
            logger.info(msg)
            t0 = time.perf_counter()
            mod = cpp_extension.load(
                name=_NAME,
                sources=[str(s) for s in ext_cache.SOURCES],
                build_directory=str(d),
                extra_cflags=list(ext_cache.CFLAGS),
                verbose=False,
                is_python_module=True,
            )
            so = Path(mod.__file__)
            _seal(so)
            fd = os.open(d / "READY", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w") as f:
                f.write(so.name + "\n")
            _seal(d / "READY")
            dt = time.perf_counter() - t0
            print(f"tpx: C++ extension built in {dt:.1f} s", file=sys.stderr, flush=True)
            return so, mod
        finally:
            fcntl.flock(lockf, fcntl.LOCK_UN)


cached_library = ext_cache.cached_library


def is_loaded() -> bool:
    return _module is not None


def on_load(fn) -> None:
    """Run ``fn(module)`` once the extension is loaded (immediately if it already is)."""
    with _lock:
        if _module is not None:
            fn(_module)
        else:
            _on_load.append(fn)


def get(build: bool = True) -> ModuleType:
    """The loaded extension; builds it first if no cache has it (unless ``build=False``)."""
    global _module
    if _module is not None:
        return _module
    with _lock:
        if _module is not None:
            return _module
        so = cached_library()
        built: ModuleType | None = None
        if so is None:
            if not build:
                raise RuntimeError("tpx C++ extension is not built yet")
            digest = ext_cache.source_hash()
            errors = []
            for d in ext_cache.candidate_dirs(digest):
                problem = ext_cache.prepare_dir(d)
                if problem is not None:
                    logger.warning("tpx: not building the C++ extension in %s: %s", d, problem)
                    errors.append(problem)
                    continue
                if not _writable(d):
                    errors.append(f"{d}: not writable")
                    continue
                try:
                    so, built = _build(d)
                    break
                except OSError as exc:  # disk full, permissions: another dir may work
                    errors.append(f"{d}: {exc}")
                    logger.warning("tpx: building the extension in %s failed: %s", d, exc)
                except Exception as exc:  # a compiler error would fail the same way elsewhere
                    errors.append(f"{d}: {exc}")
                    break
            if so is None:
                raise RuntimeError(
                    "tpx: could not build the C++ extension (needs a C++ compiler and ninja; "
                    "set TPX_EXTENSION_DIR to a dir only you can write). Tried: " + "; ".join(errors)
                )
        mod = built if built is not None else _import_so(so)
        _module = mod
        callbacks, _on_load[:] = list(_on_load), []
    for fn in callbacks:
        fn(mod)
    return mod
