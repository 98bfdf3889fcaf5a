"""The seccomp filter every bubblewrap run (cold and warm) gets: classic BPF, built here.

The filter shrinks the kernel interface a sandboxed program can reach to what PyTorch programs
use. It returns ``EPERM`` for system calls that create or enter namespaces (``unshare``, ``setns``,
``clone`` with a ``CLONE_NEW*`` flag), change mounts (``mount``, ``umount2``, ``pivot_root`` and the
new mount API), load kernel code or programs (``bpf``, ``init_module``/``finit_module``/
``delete_module``, ``kexec_*``), reach the kernel keyrings (``keyctl``, ``add_key``,
``request_key``), and others that have been a source of kernel exploits and that no training or
test program needs (``perf_event_open``, ``userfaultfd``, ``ptrace``, ``personality`` changes other
than the harmless ones, ``swapon``/``swapoff``, ``reboot``, ``acct``, ``quotactl``,
``lookup_dcookie``, ``iopl``/``ioperm``, ``open_by_handle_at``/``name_to_handle_at``, ``io_uring_*``). ``clone3``
passes its flags in memory a filter cannot read, so it returns ``ENOSYS``: the C library then
falls back to ``clone``, whose flags are checked. Every other call is allowed. A system call of
another ABI than the native one (32-bit ``int 0x80``) ends the process; x32 calls return ``ENOSYS``.

Built for x86_64 and aarch64 (``platform.machine()``); elsewhere ``filter_program`` returns None
and the runs say the filter is unavailable. Standard library only: the instructions are
``struct sock_filter`` packed with ``struct``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

# struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; } (native byte order)
_INSN = struct.Struct("=HBBI")
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K

RET_KILL_PROCESS = 0x80000000
RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

# struct seccomp_data offsets
_NR = 0
_ARCH = 4
_ARG0_LOW = 16  # the low 32 bits of args[0] (little-endian on both arches built here)

X32_BIT = 0x40000000
# every CLONE_NEW* flag that clone() takes: NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
CLONE_NEW_MASK = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
# personality() values programs use for harmless reasons (query, PER_LINUX, PER_LINUX32, UNAME26)
PERSONALITY_ALLOWED = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)

# Denied with EPERM (name -> why, the documented list); ``clone``/``clone3``/``personality`` separately.
DENIED: dict[str, str] = {
    "unshare": "new namespaces (a nested user namespace gives a fresh set of capabilities)",
    "setns": "entering other namespaces",
    "mount": "mounts", "umount2": "mounts", "pivot_root": "mounts", "move_mount": "mounts",
    "open_tree": "mounts", "fsopen": "mounts", "fsconfig": "mounts", "fsmount": "mounts", "fspick": "mounts",
    "mount_setattr": "mounts",
    "bpf": "loading BPF programs into the kernel",
    "keyctl": "the kernel keyrings", "add_key": "the kernel keyrings", "request_key": "the kernel keyrings",
    "perf_event_open": "performance counters (kernel exploits, side channels)",
    "userfaultfd": "user page-fault handling (a staple of kernel exploits)",
    "kexec_load": "loading a new kernel", "kexec_file_load": "loading a new kernel",
    "init_module": "kernel modules", "finit_module": "kernel modules", "delete_module": "kernel modules",
    "ptrace": "tracing other processes",
    "swapon": "swap", "swapoff": "swap", "reboot": "rebooting", "acct": "process accounting",
    "quotactl": "disk quotas", "quotactl_fd": "disk quotas", "lookup_dcookie": "kernel profiling",
    "iopl": "I/O ports", "ioperm": "I/O ports",
    "open_by_handle_at": "opening files by handle (escapes a mount tree)",
    "name_to_handle_at": "file handles",
    "io_uring_setup": "io_uring (a second way into the kernel that a filter cannot see into)",
    "io_uring_enter": "io_uring", "io_uring_register": "io_uring",
}

_SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "move_mount": 429,
        "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
        "bpf": 321, "keyctl": 250, "add_key": 248, "request_key": 249, "perf_event_open": 298,
        "userfaultfd": 323, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
        "finit_module": 313, "delete_module": 176, "ptrace": 101, "swapon": 167, "swapoff": 168,
        "reboot": 169, "acct": 163, "quotactl": 179, "quotactl_fd": 443, "lookup_dcookie": 212,
        "iopl": 172, "ioperm": 173, "open_by_handle_at": 304, "name_to_handle_at": 303,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "clone": 56, "clone3": 435, "personality": 135,
    },
    "aarch64": {
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "move_mount": 429,
        "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
        "bpf": 280, "keyctl": 219, "add_key": 217, "request_key": 218, "perf_event_open": 241,
        "userfaultfd": 282, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
        "finit_module": 273, "delete_module": 106, "ptrace": 117, "swapon": 224, "swapoff": 225,
        "reboot": 142, "acct": 89, "quotactl": 60, "quotactl_fd": 443, "lookup_dcookie": 18,
        "open_by_handle_at": 265, "name_to_handle_at": 264,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "clone": 220, "clone3": 435, "personality": 92,
    },
}
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_MACHINE_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def _arch(machine: str | None = None) -> str | None:
    m = (machine or platform.machine()).lower()
    m = _MACHINE_ALIASES.get(m, m)
    return m if m in _SYSCALLS else None


def unavailable_reason(machine: str | None = None) -> str | None:
    """Why this machine gets no filter (None: it gets one)."""
    if _arch(machine) is None:
        return (f"no seccomp filter for {machine or platform.machine()} (built for x86_64 and aarch64): "
                "namespace, mount, bpf, keyring and module calls are refused by missing capabilities only")
    return None


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return _INSN.pack(code, jt, jf, k)


def _errno(err: int) -> int:
    return _RET_ERRNO | (err & 0xFFFF)


def filter_program(machine: str | None = None) -> bytes | None:
    """The compiled filter (``struct sock_filter`` instructions) for ``machine`` (default: this
    one), or None on an architecture it is not built for."""
    arch = _arch(machine)
    if arch is None:
        return None
    nrs = _SYSCALLS[arch]
    prog = [
        _insn(_LD_W_ABS, _ARCH),
        _insn(_JEQ_K, AUDIT_ARCH[arch], jt=1, jf=0),
        _insn(_RET_K, RET_KILL_PROCESS),  # another ABI (i386 int 0x80): its numbers mean other calls
        _insn(_LD_W_ABS, _NR),
    ]
    if arch == "x86_64":  # x32 calls share the arch value and set bit 30 of the number: none exist here
        prog += [_insn(_JGE_K, X32_BIT, jt=0, jf=1), _insn(_RET_K, _errno(errno.ENOSYS))]
    for name in DENIED:
        if name in nrs:
            prog += [_insn(_JEQ_K, nrs[name], jt=0, jf=1), _insn(_RET_K, _errno(errno.EPERM))]
    prog += [_insn(_JEQ_K, nrs["clone3"], jt=0, jf=1), _insn(_RET_K, _errno(errno.ENOSYS))]
    # personality(arg): the query and the harmless personas only (not ADDR_NO_RANDOMIZE & co)
    allowed = PERSONALITY_ALLOWED
    block = [_insn(_LD_W_ABS, _ARG0_LOW)]
    for i, value in enumerate(allowed):
        block.append(_insn(_JEQ_K, value, jt=len(allowed) - i, jf=0))  # -> the ALLOW after the EPERM
    block += [_insn(_RET_K, _errno(errno.EPERM)), _insn(_RET_K, RET_ALLOW)]
    prog += [_insn(_JEQ_K, nrs["personality"], jt=0, jf=len(block)), *block]
    # clone(flags, ...): no new namespaces (the nested user namespace above all)
    prog += [
        _insn(_JEQ_K, nrs["clone"], jt=0, jf=3),
        _insn(_LD_W_ABS, _ARG0_LOW),
        _insn(_JSET_K, CLONE_NEW_MASK, jt=0, jf=1),
        _insn(_RET_K, _errno(errno.EPERM)),
        _insn(_RET_K, RET_ALLOW),
    ]
    return b"".join(prog)


def filter_fd(program: bytes) -> int:
    """A descriptor holding ``program`` from its start, for ``bwrap --seccomp FD`` (close-on-exec:
    pass it with ``pass_fds``). The caller closes it once bubblewrap has started."""
    fd = os.memfd_create("ferry-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


def install(program: bytes) -> None:
    """Apply ``program`` to the calling thread (and what it starts) with ``prctl(PR_SET_SECCOMP)``:
    the warm path's equivalent of ``bwrap --seccomp``. Needs no_new_privs set first (or
    CAP_SYS_ADMIN); OSError when the kernel refuses it."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // _INSN.size, ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(prog), ctypes.c_ulong(0),
                  ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"installing the seccomp filter: {os.strerror(err)}")
