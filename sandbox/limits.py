"""Resource limits for a sandboxed run, and the rlimits applied before exec."""

from __future__ import annotations

import resource
import shutil
from dataclasses import asdict, dataclass, field
from typing import Any

from sandbox import envvars
from sandbox.hostmem import default_disk, default_run_memory
from sandbox.sizes import GiB, MiB

DISK_LIMIT_ENV = "FERRY_DISK_LIMIT"  # the default disk cap of a run (``--disk-limit`` wins)
MIN_DISK_BYTES = 1 * MiB


@dataclass(frozen=True)
class Limits:
    """What one sandboxed command may use. ``None`` means "leave the inherited limit"."""

    timeout_s: float = 600.0  # wall clock, whole process tree killed at the deadline
    # The memory and disk defaults follow the host (``sandbox.hostmem``): at most 16 GiB and 4 GiB,
    # less where the host cannot back them for every run in flight.
    memory_bytes: int | None = field(default_factory=default_run_memory)  # RLIMIT_AS (address space) per process
    cpu_seconds: int | None = None  # RLIMIT_CPU per process; None = derived from timeout_s
    processes: int | None = 1024  # RLIMIT_NPROC (tasks incl. threads) of the sandbox uid
    file_size_bytes: int | None = 4 * GiB  # RLIMIT_FSIZE: largest file a write may produce
    open_files: int | None = 1024  # RLIMIT_NOFILE
    output_bytes: int = 256 * 1024  # captured per stream: head and tail halves are kept
    output_kill_bytes: int | None = 256 * MiB  # total output after which the run is killed
    # Everything a run may write, in all: its workspace, /tmp, /dev/shm and its artifacts dir (one
    # size-limited tmpfs, ``sandbox.runspace``); where Ferry cannot mount, the size of bubblewrap's
    # own /tmp and /dev/shm tmpfs each (the workspace then only has RLIMIT_FSIZE per file).
    disk_bytes: int = field(default_factory=default_disk)
    # all the run's processes together (cgroup), ``sandbox.cgroups``
    run_memory_bytes: int | None = field(default_factory=default_run_memory)
    run_processes: int | None = 1024  # processes + threads of the whole run (cgroup pids.max)
    # a run stalled this long in its teardown (``sandbox.teardown``) is ended with its stacks; None: never
    teardown_grace_s: float | None = 5.0

    def effective_cpu_seconds(self) -> int | None:
        if self.cpu_seconds is not None:
            return self.cpu_seconds
        # CPU time can exceed wall time with several threads; the wall clock is the real
        # bound, this one only stops a runaway that escaped the timer.
        return int(max(60.0, self.timeout_s * 8))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


MAX_DISK_BYTES = 2**50  # 1 PiB: past it a size is a typo (and overflows the kernel's counters)


def parse_size(text: str) -> int:
    """A run's disk cap: ``512M``, ``4G``, ``4GiB``, ``1.5G`` or plain bytes (``sandbox.envvars.parse_size``),
    at least 1M; ValueError saying what is accepted otherwise."""
    value = envvars.parse_size(text)
    if value < MIN_DISK_BYTES:
        raise ValueError(f"{text!r} is too small: a run needs at least 1M")
    if value > MAX_DISK_BYTES:
        raise ValueError(f"{str(text)[:40]!r} is more than any host has: give at most 1024T (the run's disk is a "
                         "tmpfs in memory; the host's figures are in `ferry doctor`)")
    return value


def disk_limit_from_env() -> int | None:
    """The disk cap ``FERRY_DISK_LIMIT`` sets, or None when unset; ValueError naming the variable
    when its value is not a size."""
    return envvars.env_value(DISK_LIMIT_ENV, None, parse_size)


def rlimit_pairs(limits: Limits) -> list[tuple[int, int]]:
    """(resource, value) pairs to set; soft == hard so the child cannot raise them."""
    pairs: list[tuple[int, int]] = []
    if limits.memory_bytes is not None:
        pairs.append((resource.RLIMIT_AS, int(limits.memory_bytes)))
    cpu = limits.effective_cpu_seconds()
    if cpu is not None:
        pairs.append((resource.RLIMIT_CPU, int(cpu)))
    if limits.processes is not None:
        pairs.append((resource.RLIMIT_NPROC, int(limits.processes)))
    if limits.file_size_bytes is not None:
        pairs.append((resource.RLIMIT_FSIZE, int(limits.file_size_bytes)))
    if limits.open_files is not None:
        pairs.append((resource.RLIMIT_NOFILE, int(limits.open_files)))
    pairs.append((resource.RLIMIT_CORE, 0))
    return pairs


_PRLIMIT_NAMES = {
    resource.RLIMIT_AS: "as",
    resource.RLIMIT_CPU: "cpu",
    resource.RLIMIT_NPROC: "nproc",
    resource.RLIMIT_FSIZE: "fsize",
    resource.RLIMIT_NOFILE: "nofile",
    resource.RLIMIT_CORE: "core",
}


def soft_hard(res: int, value: int) -> tuple[int, int]:
    _, hard = resource.getrlimit(res)
    if hard != resource.RLIM_INFINITY and value > hard:
        value = hard
    # CPU: the soft limit sends SIGXCPU (reported as cpu_time), the hard one a second later
    # SIGKILL for programs that catch it.
    hard_value = value + 1 if res == resource.RLIMIT_CPU else value
    if hard != resource.RLIM_INFINITY:
        hard_value = min(hard_value, hard)
    return value, hard_value


def prlimit_prefix(pairs: list[tuple[int, int]]) -> list[str] | None:
    """``prlimit --as=S:H ... --`` setting the limits then exec'ing the command, or None when
    util-linux's prlimit is missing. Cheaper than a ``preexec_fn``, which forces a full fork()
    of the (large) parent instead of vfork: ~30 ms per run with torch loaded."""
    exe = shutil.which("prlimit")
    if exe is None:
        return None
    argv = [exe]
    for res, value in pairs:
        soft, hard = soft_hard(res, value)
        argv.append(f"--{_PRLIMIT_NAMES[res]}={soft}:{hard}")
    return [*argv, "--"]


def apply_rlimits(pairs: list[tuple[int, int]]) -> None:
    """Set the limits in the current process (called in the child between fork and exec).

    Only async-signal-safe-ish work here: no logging, no allocation-heavy code.
    """
    for res, value in pairs:
        resource.setrlimit(res, soft_hard(res, value))
