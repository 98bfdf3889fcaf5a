"""Build (once) and load tpx's small C++ extension (``backend/csrc/tpx_ext.cpp``).

The extension is JIT-compiled with ``torch.utils.cpp_extension.load`` the first time tpx is
used, into a persistent cache keyed by a hash of the sources, the torch version and the Python
version: ``$TPX_EXTENSION_DIR`` if set, else ``~/.cache/ferry/tpx-ext/<hash>``, else (home
missing or read-only, as in the sandbox) a per-user temp dir. Later processes load the cached
shared object directly (no compiler, no ninja). Concurrent builders (pytest workers) serialise
on an ``flock`` in the cache dir, so only one compiles and the others load its result. Nothing
here downloads anything.
"""

from __future__ import annotations

import fcntl
import importlib.util
import logging
import os
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

from backend_autoload import ext_cache

logger = logging.getLogger(__name__)

_NAME = "tpx_ext"
_lock = threading.RLock()
_module: ModuleType | None = None
_on_load: list = []


def _writable(d: Path) -> bool:
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = d / f".probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
        return True
    except OSError:
        return False


def _import_so(so: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(so.stem, so)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _build(d: Path) -> Path:
    from torch.utils import cpp_extension

    with open(d / "build.lock", "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        try:
            so = ext_cache.built_library(d)
            if so is not None:  # another process built it while we waited
                return so
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
                extra_cflags=["-O2"],
                verbose=False,
                is_python_module=True,
            )
            so = Path(mod.__file__)
            (d / "READY").write_text(so.name + "\n")
            dt = time.perf_counter() - t0
            print(f"tpx: C++ extension built in {dt:.1f} s", file=sys.stderr, flush=True)
            return so
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
        if so is None:
            if not build:
                raise RuntimeError("tpx C++ extension is not built yet")
            digest = ext_cache.source_hash()
            errors = []
            for d in ext_cache.candidate_dirs(digest):
                if not _writable(d):
                    errors.append(f"{d}: not writable")
                    continue
                try:
                    so = _build(d)
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
                    "set TPX_EXTENSION_DIR to a writable dir). Tried: " + "; ".join(errors)
                )
        mod = _import_so(so)
        _module = mod
        callbacks, _on_load[:] = list(_on_load), []
    for fn in callbacks:
        fn(mod)
    return mod
