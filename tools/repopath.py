"""Which repository paths Ferry refuses to read: the filesystem root and the kernel's pseudo
filesystems (``/proc``, ``/sys``, ``/dev``, ``/run``), named directly or through a link.

Walking them is never what the user meant (``ferry migrate /proc`` walked every process's files,
``/dev`` holds devices and FIFOs, ``/`` the whole machine), so every reader of a repository path
(``ferry scan/run/check/migrate/pr``, the service's path-based create) asks ``repo_path_problem``
first and refuses with its message.
"""

from __future__ import annotations

import os
from pathlib import Path

PSEUDO_TREES: tuple[str, ...] = ("/proc", "/sys", "/dev", "/run")


def repo_path_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be a repository (its real path is ``/`` or inside a pseudo
    filesystem), or None."""
    shown = os.fspath(path)
    real = Path(os.path.realpath(Path(shown).expanduser()))
    via = "" if str(real) == os.path.abspath(os.path.expanduser(shown)) else f" (it resolves to {real})"
    if real == Path("/"):
        return (f"{shown} is the filesystem root{via}: Ferry does not walk the whole machine; "
                "pass the repository's own folder")
    for tree in PSEUDO_TREES:
        if real == Path(tree) or Path(tree) in real.parents:
            return (f"{shown} is inside {tree}{via}, a kernel pseudo filesystem, not a repository; "
                    "pass the repository's folder")
    return None
