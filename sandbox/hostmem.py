"""Per-run memory and disk defaults that follow the host (``/proc/meminfo``, Ferry's own cgroup).

A run's memory cap (``RLIMIT_AS`` and the whole-run cgroup) and its disk cap (a tmpfs: RAM) used
to be fixed at 16 GiB and 4 GiB; several runs go at once (the service's workers, a migration's
background reference run beside its tpx run), so on a small host a few hostile runs could push
the whole machine out of memory. The defaults are now what the host can back:

    usable  = min(MemTotal, the memory limit of Ferry's own cgroup) - headroom
    headroom = max(1 GiB, usable total / 8)            (the host, Ferry itself, page cache)
    budget  = usable / runs in flight                  (memory + tmpfs of one run)
    disk    = min(4 GiB, budget / 4), memory = min(16 GiB, budget - disk)

never below ``MIN_RUN_MEMORY`` (1 GiB; the disk then gives way) / ``MIN_RUN_DISK`` (256 MiB): a
host that cannot give every run in flight that much does not ``fit()``, and ``ferry serve`` refuses
such a worker count. "Runs in flight" is what this process may run at once (:func:`runs_in_flight`):
one foreground run per session (a CLI migration is one; the service has its workers and the PR bot's)
plus the background runs beside them: each session's reference run, and while cores are spare the
speculative tests and the CPU check, at most ``parallel - 1`` of those in the whole process (the
scheduler's ``spare_cores``). The service sets it from its workers (``set_runs_in_flight``).
Readers take a path or the text, so tests need no real /proc.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from sandbox.sizes import GiB, MiB, format_size

logger = logging.getLogger(__name__)

MAX_RUN_MEMORY = 16 * GiB
MAX_RUN_DISK = 4 * GiB
MIN_RUN_MEMORY = 1 * GiB  # below this a PyTorch run does not start: refuse rather than OOM
MIN_RUN_DISK = 256 * MiB
MIN_HEADROOM = 1 * GiB
PARALLEL_ENV = "FERRY_PARALLEL_RUNS"
MEMINFO = Path("/proc/meminfo")
MEMINFO_ENV = "FERRY_MEMINFO"
CGROUP_FILE = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")
_NO_LIMIT = 1 << 62  # cgroup v1's "unlimited" is 2^63 rounded to pages

_runs_in_flight: int | None = None  # None: one session's (runs_in_flight(1))


def parallel_runs() -> int:
    """How many runs may go side by side: ``FERRY_PARALLEL_RUNS`` if set to a whole number (1 turns
    side-by-side runs off), else this process's usable cores."""
    raw = os.environ.get(PARALLEL_ENV, "").strip()
    if raw:
        if raw.isdigit():
            return max(1, int(raw))
        logger.warning("%s=%r is not a whole number; using the core count", PARALLEL_ENV, raw[:40])
    return usable_cores()


# The runs of one migration that go side by side at most: the reference, the target run (or a cause trial),
# the tests and the CPU check.
SIDE_BY_SIDE = 4


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def side_by_side_threads() -> int:
    """The intra-op threads of one run among a migration's runs side by side: the usable cores shared by
    the runs that may go at once (:func:`parallel_runs`, at most ``SIDE_BY_SIDE``). On two cores that is
    one: two runs with two threads each wait on each other at every op of a small model (a GAN's
    migration took 41-75 s instead of 13-16 s at load average 5-9). ``FERRY_PARALLEL_RUNS=1`` gives the
    one run every core."""
    return max(1, usable_cores() // min(parallel_runs(), SIDE_BY_SIDE))


def runs_in_flight(sessions: int, parallel: int | None = None) -> int:
    """The most sandboxed runs ``sessions`` migrations in one process can have at once: a foreground
    run each, plus the background runs (each session's reference, and up to ``parallel - 1`` in all:
    the tests and the CPU check that start only on spare cores). With ``parallel`` 1 nothing runs
    beside the foreground."""
    sessions = max(1, int(sessions))
    parallel = parallel_runs() if parallel is None else max(1, int(parallel))
    return sessions if parallel < 2 else sessions + max(sessions, parallel - 1)


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` as bytes per key (``MemTotal``, ``MemAvailable``...)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if not parts or not parts[0].isdigit():
            continue
        unit = parts[1].lower() if len(parts) > 1 else ""
        out[key.strip()] = int(parts[0]) * (1024 if unit == "kb" else 1)
    return out


def read_meminfo(path: Path | None = None) -> dict[str, int]:
    """The host's meminfo: ``path``, else ``$FERRY_MEMINFO`` (a container whose /proc/meminfo shows
    the machine's, not its own share), else /proc/meminfo."""
    path = path or Path(os.environ.get(MEMINFO_ENV) or MEMINFO)
    try:
        return parse_meminfo(path.read_text())
    except OSError as exc:
        logger.warning("cannot read %s (%s): per-run defaults assume a 16 GiB host", path, exc)
        return {"MemTotal": 16 * GiB, "MemAvailable": 16 * GiB}


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit():
        return None  # "max"
    value = int(text)
    return value if value < _NO_LIMIT else None


def cgroup_memory_limit(cgroup_file: Path = CGROUP_FILE, root: Path = CGROUP_ROOT) -> int | None:
    """The tightest memory limit of the cgroup this process is in and of its ancestors (v2
    ``memory.max``, v1 ``memory.limit_in_bytes``), or None when there is none."""
    try:
        lines = cgroup_file.read_text().splitlines()
    except OSError:
        return None
    limits: list[int] = []
    for line in lines:
        _, controllers, rel = [*line.split(":", 2), "", ""][:3]
        if controllers == "":
            base, name = root, "memory.max"
        elif "memory" in controllers.split(","):
            base, name = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        path = base / rel.lstrip("/")
        while True:
            limit = _read_limit(path / name)
            if limit is not None:
                limits.append(limit)
            if path == base or base not in path.parents:
                break
            path = path.parent
    return min(limits) if limits else None


@dataclass(frozen=True)
class HostBudget:
    """What the host can back and how the per-run defaults follow from it."""

    total_bytes: int  # MemTotal
    available_bytes: int  # MemAvailable (now)
    cgroup_bytes: int | None  # Ferry's own cgroup limit, if any
    usable_bytes: int  # what runs may take in all, headroom left for the host
    runs_in_flight: int
    run_memory_bytes: int  # the default memory cap of one run
    disk_bytes: int  # the default disk (tmpfs) cap of one run

    def fits(self) -> bool:
        """True when ``runs_in_flight`` runs of the minimum size fit in the usable memory."""
        return self.runs_in_flight * (MIN_RUN_MEMORY + MIN_RUN_DISK) <= self.usable_bytes

    def max_runs(self) -> int:
        return max(0, self.usable_bytes // (MIN_RUN_MEMORY + MIN_RUN_DISK))

    def describe(self) -> str:
        limit = f", cgroup limit {format_size(self.cgroup_bytes)}" if self.cgroup_bytes else ""
        return (f"{format_size(self.run_memory_bytes)} memory + {format_size(self.disk_bytes)} disk per run, "
                f"{self.runs_in_flight} runs in flight (host {format_size(self.total_bytes)}{limit}, "
                f"{format_size(self.usable_bytes)} usable by runs)")

    def to_dict(self) -> dict[str, int | str | None]:
        return {"total_bytes": self.total_bytes, "available_bytes": self.available_bytes,
                "cgroup_bytes": self.cgroup_bytes, "usable_bytes": self.usable_bytes,
                "runs_in_flight": self.runs_in_flight, "run_memory_bytes": self.run_memory_bytes,
                "disk_bytes": self.disk_bytes, "describe": self.describe()}


def budget(runs_in_flight: int | None = None, *, meminfo: dict[str, int] | None = None,
           cgroup_bytes: int | None = None, read_cgroup: bool = True) -> HostBudget:
    """The per-run defaults for ``runs_in_flight`` runs at once (default: this process's setting)
    on the host ``meminfo`` describes (default: ``/proc/meminfo``) under ``cgroup_bytes`` (default:
    Ferry's own cgroup, unless ``read_cgroup`` is False)."""
    runs = max(1, runs_in_flight if runs_in_flight is not None else _current_runs())
    info = meminfo if meminfo is not None else read_meminfo()
    total = info.get("MemTotal", 16 * GiB)
    available = info.get("MemAvailable", total)
    if cgroup_bytes is None and read_cgroup and meminfo is None:
        cgroup_bytes = cgroup_memory_limit()
    ceiling = min(total, cgroup_bytes) if cgroup_bytes else total
    usable = max(0, ceiling - max(MIN_HEADROOM, ceiling // 8))
    per_run = usable // runs
    disk = max(MIN_RUN_DISK, min(MAX_RUN_DISK, per_run // 4))
    memory = min(MAX_RUN_MEMORY, per_run - disk)
    if memory < MIN_RUN_MEMORY:  # memory first: the disk gives way down to its own floor
        memory = MIN_RUN_MEMORY
        disk = max(MIN_RUN_DISK, per_run - memory)
    return HostBudget(total_bytes=total, available_bytes=available, cgroup_bytes=cgroup_bytes, usable_bytes=usable,
                      runs_in_flight=runs, run_memory_bytes=memory, disk_bytes=disk)


_cached: dict[int, HostBudget] = {}


def _current_runs() -> int:
    return _runs_in_flight if _runs_in_flight is not None else runs_in_flight(1)


def current() -> HostBudget:
    """This host's budget for this process's runs in flight (read once per setting)."""
    runs = _current_runs()
    if runs not in _cached:
        _cached[runs] = budget(runs)
    return _cached[runs]


def set_runs_in_flight(runs: int) -> HostBudget:
    """How many runs this process may have in flight (the service: :func:`runs_in_flight` of its sessions);
    the defaults of later ``Limits()`` follow. Returns the budget that results."""
    global _runs_in_flight
    _runs_in_flight = max(1, int(runs))
    return current()


def default_run_memory() -> int:
    return current().run_memory_bytes


def default_disk() -> int:
    return current().disk_bytes


def oversized(what: str, value: int) -> str | None:
    """A warning when an explicit cap (``what``) is larger than the memory runs may use here."""
    host = current()
    if value <= host.usable_bytes:
        return None
    return (f"{what} {format_size(value)} is more than the {format_size(host.usable_bytes)} of memory this host "
            f"can give its runs (host {format_size(host.total_bytes)}, {host.runs_in_flight} runs in flight): "
            "a run that uses it can push the whole machine out of memory")
