"""Whether a cache directory of tpx's compiled extension may be trusted with code (standard library only).

A process loads ``tpx_ext.so`` from a cache dir it did not necessarily make: ``$TPX_EXTENSION_DIR``,
``~/.cache/ferry/tpx-ext`` or a temp dir. Whoever can write any directory on the path from ``/``
down to that file can swap in a library of their own, whose constructor then runs in the loading
process (as root, when Ferry runs as root). So a cache dir is used only when:

* every directory above the cache root (the real path, symlinks resolved) is owned by the
  effective uid or root and writable by nobody else, except a root-owned sticky dir such as /tmp
  (others may add entries there but not rename or remove ours);
* the cache root, the digest dir below it, the READY file and the library are no symlinks, are
  owned by the effective uid or root and are writable by neither group nor others: never a sticky
  exception there.

Inside a user namespace (a sandboxed child of an unprivileged Ferry) the host's root appears as
the overflow uid; it is accepted for the directories above the cache root only.
"""

from __future__ import annotations

import os
import stat
from functools import lru_cache
from pathlib import Path

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


@lru_cache(maxsize=1)
def _overflow_uid() -> int | None:
    """The uid unmapped owners show as, when this process is in a user namespace; else None."""
    try:
        fields = Path("/proc/self/uid_map").read_text().split()
    except OSError:
        return None
    if fields == ["0", "0", "4294967295"]:
        return None  # the initial namespace
    try:
        return int(Path("/proc/sys/kernel/overflowuid").read_text().strip())
    except (OSError, ValueError):
        return 65534


def _root_uids(*, above_root: bool) -> set[int]:
    """The owners that count as root: 0, and above the cache root the overflow uid in a user namespace."""
    overflow = _overflow_uid() if above_root else None
    return {0} if overflow is None else {0, overflow}


def _owner_problem(st: os.stat_result, *, above_root: bool) -> str | None:
    euid = os.geteuid()
    if st.st_uid != euid and st.st_uid not in _root_uids(above_root=above_root):
        return f"owned by uid {st.st_uid}, not by this process (uid {euid}) or root"
    return None


def _stat_problem(st: os.stat_result, *, kind: str, above_root: bool) -> str | None:
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if kind == "dir" and not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if kind == "file" and not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    problem = _owner_problem(st, above_root=above_root)
    if problem is not None:
        return problem
    sticky_root = above_root and st.st_mode & stat.S_ISVTX and st.st_uid in _root_uids(above_root=True)
    if st.st_mode & _OTHERS_WRITE and not sticky_root:
        return f"is writable by others than its owner (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def entry_problem(path: Path, *, kind: str, above_root: bool = False) -> str | None:
    """Why ``path`` (one component, not followed) may not hold code; None when it may.

    ``kind`` is ``"dir"`` or ``"file"``; ``above_root`` marks a directory above the cache root
    (the sticky exception and the user-namespace owner apply there)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot be inspected ({exc.strerror or exc})"
    return _stat_problem(st, kind=kind, above_root=above_root)


def ancestors_problem(root: Path) -> tuple[Path, str] | None:
    """The first directory above the cache root ``root`` that others could write, and why."""
    try:
        parent = Path(os.path.realpath(root.parent))
    except OSError as exc:
        return root.parent, f"cannot be resolved ({exc})"
    for d in [*reversed(parent.parents), parent]:
        problem = entry_problem(d, kind="dir", above_root=True)
        if problem is not None:
            return d, problem
    return None


def cache_dir_problem(root: Path, digest_dir: Path) -> tuple[Path, str] | None:
    """The first path from ``/`` down to ``digest_dir`` (inside the cache root ``root``) that
    could hold another uid's code, and why; None when the whole chain is trusted."""
    found = ancestors_problem(root)
    if found is not None:
        return found
    d = root
    for part in [None, *digest_dir.relative_to(root).parts]:
        if part is not None:
            d = d / part
        problem = entry_problem(d, kind="dir")
        if problem is not None:
            return d, problem
    return None


def open_trusted_file(path: Path) -> int:
    """An fd of ``path`` opened without following a link, checked like ``entry_problem`` (the
    checks are made on the opened file, so a swap after them cannot change what is read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        problem = _stat_problem(os.fstat(fd), kind="file", above_root=False)
        if problem is not None:
            raise PermissionError(f"{path} {problem}")
    except BaseException:
        os.close(fd)
        raise
    return fd
