"""Joining a running sandbox's namespaces and giving up privileges (Linux syscalls through libc).

Used by the warm-start path (``sandbox.warm``): a process forked from a pre-imported
interpreter enters the namespaces bubblewrap made for one run, exactly where that run's own
command lives, then drops to what the command would have had: the run's uid, no capabilities,
no new privileges.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os

_libc = ctypes.CDLL(None, use_errno=True)

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_VERSION_3 = 0x20080522
_LAST_CAP = 63

# The mount namespace last: after it, /proc is the sandbox's and the pid given names another process.
NS_ORDER: tuple[str, ...] = ("user", "ipc", "uts", "net", "pid", "cgroup", "mnt")
NS_GET_USERNS = 0xB701  # ioctl on a namespace fd: an fd of the user namespace that owns it


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


def _ident(fd_or_path: int | str) -> tuple[int, int]:
    st = os.fstat(fd_or_path) if isinstance(fd_or_path, int) else os.stat(fd_or_path)
    return st.st_dev, st.st_ino


def _open_namespaces(pid: int, fds: dict[str, int]) -> None:
    """Fill ``fds`` with the namespaces of ``pid`` that differ from ours, all of one process
    (opened through one /proc/PID descriptor: a pid reused meanwhile cannot mix in)."""
    try:
        proc_dir = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise NamespaceError(exc.errno or 0, f"process {pid} (the sandbox) is gone: {exc.strerror}") from exc
    try:
        for ns in NS_ORDER:
            try:
                fd = os.open(f"ns/{ns}", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_dir)
            except FileNotFoundError:
                continue  # a kind this kernel lacks, or the process has ended (``require`` notices)
            if _ident(fd) != _ident(f"/proc/self/ns/{ns}"):
                fds[ns] = fd
            else:
                os.close(fd)
    finally:
        os.close(proc_dir)


def join_namespaces(pid: int, require: tuple[str, ...] = ("mnt", "pid")) -> list[str]:
    """Enter every namespace of ``pid`` that differs from ours; returns the ones joined.

    Unprivileged bubblewrap makes its namespaces inside a user namespace of its own and runs the
    command in a second, nested one; joining the nested one first would leave no rights over the
    others. So: the user namespace owning the others first, then the others, then the command's.
    The pid namespace applies to children only: the caller must fork afterwards.
    Raises ``NamespaceError`` when ``pid`` is gone or shares one of ``require`` with us (joining
    nothing would leave the caller outside the sandbox, in the host's namespaces)."""
    fds: dict[str, int] = {}
    owner: int | None = None
    try:
        _open_namespaces(pid, fds)
        missing = [ns for ns in require if ns not in fds]
        if missing:
            raise NamespaceError(errno.ESRCH, f"process {pid} has no namespace of its own ({', '.join(missing)}): "
                                    "it ended, or is not a sandbox")
        current_user = _ident("/proc/self/ns/user")
        others = [ns for ns in NS_ORDER if ns in fds and ns != "user"]
        if others:
            owner = fcntl.ioctl(fds[others[0]], NS_GET_USERNS)
            if _ident(owner) != current_user:
                _check(_libc.setns(owner, 0), f"setns(user namespace owning {others[0]}) of process {pid}")
                current_user = _ident(owner)
        for ns in others:
            _check(_libc.setns(fds[ns], 0), f"setns({ns}) into process {pid}")
        if "user" in fds and _ident(fds["user"]) != current_user:
            _check(_libc.setns(fds["user"], 0), f"setns(user) into process {pid}")
    finally:
        for fd in [*fds.values(), *([owner] if owner is not None else [])]:
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
        if _libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0)) != 0:
            if ctypes.get_errno() == errno.EINVAL:  # past the last capability this kernel knows
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
    # The uid change (or joining a user namespace) made us non-dumpable, which a command that was
    # exec'ed is not: /proc/self/environ, /proc/self/mem, ... would be root's and unreadable to it.
    prctl(PR_SET_DUMPABLE, 1)
