"""A run's writable space: one size-limited tmpfs holding everything the run may write.

``open_run_space(cap)`` mounts a tmpfs of ``cap`` bytes (``size=``, and one inode per 4 KiB so a
flood of empty files stops too) on a fresh host directory. It holds the run's workspace copy
(``workspace_root``), ``tmp/`` and ``shm/`` (bubblewrap binds them on /tmp and /dev/shm instead of
its own tmpfs mounts) and the child-writable artifacts dirs (``bind_into``: the space's dir is
bind-mounted on the host dir for the run, so what the child writes there, at the host dir's path or
at the space's own, ``bound``, counts against the cap, and is copied back into it afterwards). One
cap covers them all, enforced by the kernel: a write past it fails with ENOSPC (SIGBUS for a page
of a full /dev/shm mapping). ``full()`` tells, after the run, whether it ran out.

The mount's source and its mount point are named ``ferry-space-PID-STARTTIME-nPIDNS-RANDOM`` after the
Ferry process that made it, so a later Ferry unmounts what a Ferry killed with SIGKILL left behind
(``sweep_stale``; nothing is read from inside the space, which the run could write). A space named
after another pid namespace is never swept: its owner cannot be checked from here, and removing even
its empty-looking mount point would detach the mount where that Ferry runs.

Without mount rights (Ferry not root, or no CAP_SYS_ADMIN) ``open_run_space`` returns an unmounted
space saying why; the sandbox then caps /tmp and /dev/shm with bubblewrap's own ``--size`` tmpfs and
the workspace only per file (RLIMIT_FSIZE), and the result says so.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import logging
import os
import re
import secrets
import stat
import subprocess
import threading
from functools import lru_cache
from pathlib import Path

from sandbox.limits import Limits
from sandbox.mountinfo import mounts
from sandbox.procs import OWNER_PATTERN, owner_alive_match, owner_token
from sandbox.sizes import format_size
from sandbox.workspace import default_root

logger = logging.getLogger(__name__)

MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_BIND = 0x1000
MNT_DETACH = 0x2
NAME_PREFIX = "ferry-space"
_NAME = re.compile(rf"^ferry-space-{OWNER_PATTERN}-[0-9a-f]{{8}}$")
FULL_MARGIN_BYTES = 256 * 1024  # less free than this after a failed run: it ran out of space
INODE_BYTES = 4096
MIN_INODES = 65536

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def _mount(source: str, target: Path, fstype: str | None, flags: int, data: str | None) -> None:
    ret = _libc.mount(source.encode(), str(target).encode(), fstype.encode() if fstype else None, flags,
                      data.encode() if data else None)
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(target))


def _umount(target: Path | str, flags: int = 0) -> None:
    if _libc.umount2(str(target).encode(), flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(target))


def _unmount(target: Path | str) -> bool:
    """Unmount ``target``; lazily (MNT_DETACH) when something still holds it. False when it is not
    a mount point (any more) or cannot be unmounted."""
    try:
        _umount(target)
        return True
    except OSError as exc:
        if exc.errno != errno.EBUSY:
            logger.warning("cannot unmount %s: %s", target, exc.strerror)
            return False
    try:
        _umount(target, MNT_DETACH)
        return True
    except OSError as exc:
        logger.warning("cannot unmount %s: %s", target, exc.strerror)
        return False


def _new_name() -> str:
    return f"{NAME_PREFIX}-{owner_token()}-{secrets.token_hex(4)}"


def _mount_tmpfs(base: Path, cap_bytes: int) -> Path:
    name = _new_name()
    point = base / name
    os.mkdir(point, 0o700)
    inodes = max(MIN_INODES, cap_bytes // INODE_BYTES)
    try:
        # mode 0711: the run (at the weaker isolation levels, where it sees the host) reaches its own
        # dirs by path but cannot list the space.
        _mount(name, point, "tmpfs", MS_NOSUID | MS_NODEV, f"size={int(cap_bytes)},nr_inodes={inodes},mode=0711")
    except OSError:
        os.rmdir(point)
        raise
    return point


@lru_cache(maxsize=1)
def mount_support() -> tuple[bool, str]:
    """Whether Ferry may mount a size-limited tmpfs here (probed once), and why not."""
    if os.geteuid() != 0:
        return False, f"Ferry runs as uid {os.geteuid()}, not root: it cannot mount a size-limited tmpfs"
    try:
        base = default_root()
        base.mkdir(parents=True, exist_ok=True)
        point = _mount_tmpfs(base, 64 * 1024)
    except OSError as exc:
        return False, f"mounting a tmpfs was refused ({exc.strerror}): no CAP_SYS_ADMIN here"
    _unmount(point)
    try:
        os.rmdir(point)
    except OSError:
        pass
    return True, ""


def sweep_stale() -> list[str]:
    """Unmount the run spaces (and their binds) of Ferry processes that have ended; returns the
    mount points cleaned. Mounts of a running Ferry are never touched."""
    cleaned: list[str] = []
    for m in reversed(mounts()):  # binds (mounted later) before the space itself
        match = _NAME.match(m.source)
        if m.fstype != "tmpfs" or match is None or owner_alive_match(match):
            continue
        try:
            _umount(m.point, MNT_DETACH)
        except OSError as exc:
            logger.warning("cannot unmount the stale run space %s: %s", m.point, exc.strerror)
            continue
        cleaned.append(m.point)
        if m.root == "/" and _NAME.match(os.path.basename(m.point)):
            try:
                os.rmdir(m.point)
            except OSError:
                pass
    # mount points whose mount is gone already (unmounted by hand, or a Ferry killed between its
    # mkdir and its mount): empty directories, removed
    try:
        names = os.listdir(default_root())
    except OSError:
        names = []
    for name in names:
        match = _NAME.match(name)
        if match is not None and not owner_alive_match(match):
            try:
                os.rmdir(default_root() / name)
            except OSError:
                pass
    if cleaned:
        logger.info("unmounted %d run space mount(s) left by ended Ferry processes", len(cleaned))
    return cleaned


@lru_cache(maxsize=1)
def _sweep_once() -> None:
    sweep_stale()


def _strip_setid(tree: Path) -> None:
    """Clear set-uid/set-gid bits of the files under ``tree`` (a copy of what a run wrote, which no
    run can reach any more): a copy must never become a privileged program."""
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in filenames + dirnames:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                os.chmod(path, stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))


def _copy_tree(src: str, dest: Path) -> bool:
    """``cp -a`` (links stay links, never followed; owners and modes kept) then no set-id bits."""
    proc = subprocess.run(["cp", "-a", "--", src, str(dest)], capture_output=True, text=True)
    if proc.returncode != 0:
        logger.warning("copying %s out of the run space: %s", src, proc.stderr.strip()[-500:])
    _strip_setid(dest)
    return proc.returncode == 0


_open_spaces: set[RunSpace] = set()  # mounted and not closed yet: released when Ferry exits
_open_lock = threading.Lock()
_exiting = False  # set by the exit handler: no new mounts (a daemon thread may still try one)


class RunSpace:
    """One run's writable space (see the module doc). ``mounted`` False: no cap in all, ``reason`` why."""

    def __init__(self, cap_bytes: int, root: Path | None, reason: str | None = None):
        self.cap_bytes = int(cap_bytes)
        self.root = root
        self.reason = reason
        self._binds: list[tuple[Path, Path]] = []
        self._unbound: dict[Path, Path] = {}  # host dir -> the space's dir that was bound on it
        self._lock = threading.Lock()
        self._closed = False

    @property
    def mounted(self) -> bool:
        return self.root is not None

    def _sub(self, name: str) -> Path | None:
        return self.root / name if self.root is not None else None

    @property
    def workspace_root(self) -> Path | None:
        """Where the workspace copy goes (``create_workspace(src, root=...)``); None when unmounted."""
        return self._sub("ws")

    @property
    def tmp(self) -> Path | None:
        return self._sub("tmp")

    @property
    def shm(self) -> Path | None:
        return self._sub("shm")

    def bind_into(self, host_dir: Path) -> None:
        """Make the run's writes under ``host_dir`` (an empty directory) count against the cap: a dir
        of the space is mounted there until ``unbind``, which copies what the run left into it."""
        with self._lock:
            if self.root is None or self._closed:
                return
            sub = self.root / f"bind{len(self._binds)}"
            os.mkdir(sub)
            os.chmod(sub, 0o755)
            _mount(str(sub), Path(host_dir), None, MS_BIND, None)
            self._binds.append((sub, Path(host_dir)))

    def bound(self, host_dir: Path) -> Path | None:
        """The space's dir mounted on ``host_dir`` now (``bind_into``), None when it is not: the same
        files by a path of the space's, which the run reaches at every level (the space's root is
        0711 under the workspace root), where ``host_dir``'s own parents may be closed to it."""
        with self._lock:
            return next((sub for sub, host in self._binds if host == Path(host_dir)), None)

    def unbind(self, copy: bool = True) -> None:
        """Unmount the binds and copy what the run wrote there into the host dirs (call it once the
        run's processes are gone)."""
        while True:
            with self._lock:
                if not self._binds:
                    return
                sub, host = self._binds.pop()
            if not _unmount(host) or self.root is None or os.stat(host).st_dev == os.stat(self.root).st_dev:
                logger.warning("%s is still the run space's; its contents are not copied out", host)
                continue
            with self._lock:
                self._unbound[host] = sub
            if not copy:
                continue
            with os.scandir(sub) as entries:
                if next(entries, None) is None:
                    continue  # nothing written there: no copy to start
            _copy_tree(f"{sub}/.", host)

    def contents_of(self, host_dir: Path) -> Path | None:
        """The space's directory that was bound on ``host_dir`` (after ``unbind``; gone with
        ``close``): what the run wrote there, to be read in place rather than copied out whole."""
        with self._lock:
            return self._unbound.get(Path(host_dir)) if self.root is not None else None

    def full(self) -> bool:
        """Out of space or inodes (after a run: it wrote past the cap)."""
        if self.root is None:
            return False
        try:
            st = os.statvfs(self.root)
        except OSError:
            return False
        return st.f_bavail * st.f_frsize < FULL_MARGIN_BYTES or st.f_favail == 0

    def keep(self, tree: Path, dest: Path) -> bool:
        """Copy ``tree`` (inside the space, e.g. the workspace that ran) to ``dest`` (a new path in an
        existing host dir) before the space goes; False when the copy failed (logged)."""
        return _copy_tree(str(tree), dest)

    def scope(self, level: str) -> str:
        """What the cap covers at isolation ``level``."""
        return "workspace, /tmp, /dev/shm" if level == "bwrap" else "workspace, run artifacts"

    def close(self, copy: bool = True) -> None:
        """Unbind (copying out unless ``copy`` is False), unmount and remove the space (its contents
        go with it). Idempotent."""
        with self._lock:
            self._closed = True  # no bind after this one
        self.unbind(copy)
        with self._lock:
            root, self.root = self.root, None
        if root is not None and _unmount(root):
            try:
                os.rmdir(root)
            except OSError as exc:
                logger.warning("cannot remove the run space's mount point %s: %s", root, exc.strerror)
        with _open_lock:
            _open_spaces.discard(self)

    def __enter__(self) -> RunSpace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@atexit.register
def _release_all() -> None:
    """Ferry is exiting with spaces still mounted (a run abandoned on a daemon thread): unmount them
    now rather than leave them to the next Ferry's sweep. Nobody reads those runs' artifacts."""
    global _exiting
    with _open_lock:
        _exiting = True
        spaces = list(_open_spaces)
    for space in spaces:
        space.close(copy=False)


def open_run_space(cap_bytes: int, root: Path | None = None) -> RunSpace:
    """A mounted space of ``cap_bytes`` under ``root`` (default: the workspace root), or an unmounted
    one saying why Ferry cannot mount here. Spaces left by ended Ferry processes are unmounted first."""
    ok, why = mount_support()
    if not ok:
        return RunSpace(cap_bytes, None, why)
    _sweep_once()
    base = Path(root) if root is not None else default_root()
    try:
        base.mkdir(parents=True, exist_ok=True)
        point = _mount_tmpfs(base, cap_bytes)
    except OSError as exc:
        logger.warning("no run space (disk cap per area only): %s", exc)
        return RunSpace(cap_bytes, None, f"mounting the run's tmpfs failed: {exc.strerror}")
    space = RunSpace(cap_bytes, point)
    with _open_lock:
        registered = not _exiting
        if registered:
            _open_spaces.add(space)
    if not registered:
        space.close(copy=False)
        return RunSpace(cap_bytes, None, "Ferry is exiting")
    try:
        for name, mode in (("ws", 0o755), ("tmp", 0o1777), ("shm", 0o1777)):
            os.mkdir(point / name)
            os.chmod(point / name, mode)
    except BaseException:
        space.close()
        raise
    return space


def disk_cap_text(space: RunSpace | None, level: str, limits: Limits) -> str:
    """What capped the run's writes, as its result says it (with why when weaker)."""
    reason = space.reason if space is not None else "no run space given: the caller's own workspace directory"
    return describe_disk_cap(space is not None and space.mounted, reason, level, limits)


def describe_disk_cap(mounted: bool, reason: str | None, level: str, limits: Limits) -> str:
    """What caps a run's writes with or without a mounted space (``reason``: why not mounted)."""
    cap = format_size(limits.disk_bytes)
    if mounted:
        if level == "bwrap":
            return f"tmpfs {cap} in all (workspace, /tmp, /dev/shm, run artifacts)"
        return (f"tmpfs {cap} in all (workspace, run artifacts); /tmp and /dev/shm are the host's at isolation "
                f"{level}, not capped (TMPDIR and HOME point into the capped space)")
    files = format_size(limits.file_size_bytes) if limits.file_size_bytes else "any size"
    per_file = f"workspace: files up to {files} each (RLIMIT_FSIZE), no total cap ({reason})"
    if level == "bwrap":
        return f"/tmp and /dev/shm: tmpfs {cap} each; {per_file}"
    return f"{per_file}; /tmp and /dev/shm are the host's at isolation {level}"
