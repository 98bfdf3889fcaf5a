"""Make the tpx backend's compiled C++ extension available to sandboxed children.

The backend JIT-builds its extension once into a cache (``$TPX_EXTENSION_DIR`` or
``~/.cache/ferry/tpx-ext``). A sandboxed child sees neither the home directory nor a compiler
cache, and building there would cost 30-60 s per run, so the runner builds (or finds) it on
the host once per process (a cache lookup when it is built already) and binds the cache read-only into the sandbox with
``TPX_EXTENSION_DIR`` pointing at it. The lookup (``backend_autoload.ext_cache``) uses only a
cache dir no other uid could write, so nothing a run left in a directory it shares with the host
(the host's /tmp at ``--isolation unshare``) is found here and bound into later runs.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

logger = logging.getLogger(__name__)

_PROBE = (
    "import sys\n"
    "from backend import _ext\n"
    "so = _ext.cached_library()\n"
    "if so is None:\n"
    "    so = __import__('pathlib').Path(_ext.get().__file__)\n"
    "print(so)\n"
)


@lru_cache(maxsize=1)
def host_extension_dir() -> Path | None:
    """The cache root holding the built extension (``<root>/<digest>/...so``), or None.

    The cache is looked up in-process without importing torch (``backend_autoload.ext_cache``);
    only when nothing is built yet does a host interpreter import torch and build it.
    """
    from backend_autoload import ext_cache

    so = ext_cache.cached_library()
    if so is not None:
        return so.parent.parent
    try:
        # -P: not the caller's working directory first on sys.path (its own backend/ would be imported)
        proc = subprocess.run([sys.executable, "-P", "-c", _PROBE], capture_output=True, text=True, timeout=300,
                              env=_host_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        logger.warning("tpx extension: cannot locate it on the host (%s); tpx runs will try to build it", exc)
        return None
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        logger.warning("tpx extension: host build failed: %s", (proc.stderr.strip().splitlines() or ["?"])[-1])
        return None
    so = Path(lines[-1])
    return so.parent.parent if so.is_file() else None


def _host_env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # only the extension is wanted here
    return env
