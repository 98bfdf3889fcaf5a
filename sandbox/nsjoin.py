"""Joining a running sandbox's namespaces and giving up privileges (Linux syscalls through libc).

Used by the warm-start path (``sandbox.warm``): a process forked from a pre-imported
interpreter enters the namespaces bubblewrap made for one run, exactly where that run's own
command lives, then drops to what the command would have had: the run's uid, no capabilities,
no new privileges.
"""

from __future__ import annotations

import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)

PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_VERSION_3 = 0x20080522
_LAST_CAP = 63

# The user namespace first (it grants the rights to join the others), the mount namespace last
# (after it, /proc is the sandbox's and the pid given would name another process).
NS_ORDER: tuple[str, ...] = ("user", "ipc", "uts", "net", "pid", "cgroup", "mnt")


class NamespaceError(OSError):
    """A namespace of the target could not be joined (the caller falls back to a cold start)."""


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise NamespaceError(err, f"{what}: {os.strerror(err)}")


def prctl(option: int, arg: int = 0) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)),
           f"prctl({option})")


def die_with_parent(sig: int) -> None:
    prctl(PR_SET_PDEATHSIG, sig)


def _same(ns: str, pid: int) -> bool:
    a, b = os.stat(f"/proc/{pid}/ns/{ns}"), os.stat(f"/proc/self/ns/{ns}")
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def join_namespaces(pid: int) -> list[str]:
    """Enter every namespace of ``pid`` that differs from ours; returns the ones joined.

    The pid namespace applies to children only: the caller must fork afterwards."""
    fds: dict[str, int] = {}
    try:
        for ns in NS_ORDER:
            path = f"/proc/{pid}/ns/{ns}"
            if not os.path.exists(path) or _same(ns, pid):
                continue
            fds[ns] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        for ns in NS_ORDER:
            if ns in fds:
                _check(_libc.setns(fds[ns], 0), f"setns({ns}) into process {pid}")
    finally:
        for fd in fds.values():
            os.close(fd)
    return list(fds)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_privileges(uid: int | None) -> None:
    """Become what a sandboxed command is: ``uid`` (when given), no supplementary groups, an
    empty capability bounding set and no capabilities, no new privileges on exec."""
    for cap in range(_LAST_CAP + 1):
        if _libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
            if ctypes.get_errno() == 22:  # EINVAL: past the last capability this kernel knows
                break
            _check(-1, f"dropping capability {cap} from the bounding set")
    _libc.prctl(PR_CAP_AMBIENT, ctypes.c_ulong(PR_CAP_AMBIENT_CLEAR_ALL), ctypes.c_ulong(0), ctypes.c_ulong(0),
                ctypes.c_ulong(0))
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # leaves no capabilities behind (no SECBIT_KEEP_CAPS)
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "clearing capabilities")
    prctl(PR_SET_NO_NEW_PRIVS, 1)
