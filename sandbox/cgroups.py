"""Memory and process limits for a whole run (all its processes together) through cgroups.

``detect_control()`` probes once which level works here, strongest first, by creating and removing
a test cgroup:

``cgroup2``  a cgroup of the unified hierarchy below Ferry's own, with the ``memory`` and ``pids``
             controllers: ``memory.max``, ``memory.swap.max`` 0, ``pids.max``; ``memory.events``
             ``oom_kill`` and ``pids.events`` ``max`` say which limit was hit; ``cgroup.kill`` ends
             everything in it.
``cgroup1``  the v1 ``memory`` and ``pids`` hierarchies (a cgroup below Ferry's own in each):
             ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` when swap is accounted),
             ``pids.max``; ``memory.oom_control`` ``oom_kill`` and ``pids.events`` ``max``.
``rlimits``  neither is writable: only the per-process rlimits apply (``sandbox.limits``).

A run's first process enters its cgroup before it can fork: ``RunCgroup.wrapper()`` is a
``/bin/sh`` that writes its own pid into each ``cgroup.procs`` and execs the rest of the argv (run
as root, before bubblewrap/setpriv). A warm start's forked process writes itself there before it
joins the sandbox's namespaces (``sandbox.warm.child``). At the end everything still in the cgroup is
killed and the cgroup removed. Cgroups are named ``ferry-PID-STARTTIME-nPIDNS-RANDOM`` after their Ferry
process: ``sweep_stale`` removes those whose Ferry has ended (killed with SIGKILL), never those named
after another pid namespace (a Ferry there cannot be checked from here, and may be running).
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import re
import secrets
import signal
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from sandbox.mountinfo import mounts
from sandbox.procs import OWNER_PATTERN, is_alive, owner_alive_match, owner_token

logger = logging.getLogger(__name__)

LEVELS: tuple[str, ...] = ("cgroup2", "cgroup1", "rlimits")
NAME_PREFIX = "ferry"
_NAME = re.compile(rf"^ferry-{OWNER_PATTERN}-[0-9a-f]{{8}}$")
_ENTER = ('while [ "$1" != -- ]; do echo $$ 2>/dev/null >"$1" || '
          '{ echo "ferry sandbox: cannot enter the run\'s cgroup $1" >&2; exit 125; }; shift; done; shift; exec "$@"')
KILL_ROUNDS = 50
REMOVE_WAIT_S = 2.0


@dataclass(frozen=True)
class ControlInfo:
    """The resource-control level in force: ``bases`` are the directories run cgroups are made in
    (one per v1 hierarchy, or the one v2 directory); ``reasons`` why not a stronger level."""

    level: str
    reasons: tuple[str, ...] = ()
    bases: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # (controller or "unified", dir)

    def describe(self) -> str:
        return f"{self.level} ({'; '.join(self.reasons)})" if self.reasons else self.level


def _mounts() -> list[tuple[str, str, str]]:
    """(fstype, mount point, super options) of the cgroup filesystems mounted here."""
    return [(m.fstype, m.point, m.super_options) for m in mounts()
            if m.fstype in ("cgroup", "cgroup2") and m.root == "/"]


def _own_paths() -> dict[str, str]:
    """Our cgroup per controller (``""`` for the unified hierarchy), from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for name in parts[1].split(",") if parts[1] else [""]:
            paths[name] = parts[2]
    return paths


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _counter(path: Path, key: str) -> int:
    """``key N`` from a flat-keyed cgroup file (memory.events, pids.events, memory.oom_control)."""
    for line in _read(path).splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _probe(bases: list[tuple[str, Path]], needed: dict[str, tuple[str, ...]]) -> str | None:
    """Create a test cgroup in each base, check and write its limit files, remove it: None when that
    worked, else what failed."""
    made: list[Path] = []
    try:
        for ctl, base in bases:
            d = base / f"{NAME_PREFIX}-{owner_token()}-{secrets.token_hex(4)}"
            os.mkdir(d)
            made.append(d)
            for name in needed[ctl]:
                if not (d / name).exists():
                    return f"{d.parent} gives no {name}"
            _write(d / needed[ctl][0], str(64 * 1024**2) if "memory" in needed[ctl][0] else "64")
        return None
    except OSError as exc:
        return f"cannot create a cgroup in {exc.filename or bases[0][1]}: {exc.strerror}"
    finally:
        for d in made:
            try:
                os.rmdir(d)
            except OSError:
                pass


def _try_v2(mounts: list[tuple[str, str, str]], own: dict[str, str]) -> tuple[list[tuple[str, Path]] | None, str]:
    unified = [m for m in mounts if m[0] == "cgroup2"]
    if not unified:
        return None, "cgroup2: no unified hierarchy mounted"
    if "" not in own:
        return None, "cgroup2: this process is in no unified cgroup"
    base = Path(unified[0][1]) / own[""].lstrip("/")
    controllers = _read(base / "cgroup.controllers").split()
    missing = [c for c in ("memory", "pids") if c not in controllers]
    if missing:
        return None, (f"cgroup2 at {unified[0][1]} has no {'/'.join(missing)} controller here "
                      f"(cgroup.controllers: {' '.join(controllers) or 'none'})")
    enabled = _read(base / "cgroup.subtree_control").split()
    if not all(c in enabled for c in ("memory", "pids")):
        try:
            _write(base / "cgroup.subtree_control", "+memory +pids")
        except OSError as exc:
            return None, (f"cgroup2: cannot enable memory/pids below {base} ({exc.strerror}; a cgroup that holds "
                          "processes cannot delegate them: start Ferry in a cgroup of its own, e.g. "
                          "systemd-run -p Delegate=yes)")
    why = _probe([("unified", base)], {"unified": ("memory.max", "pids.max", "memory.events", "pids.events")})
    return (None, f"cgroup2: {why}") if why else ([("unified", base)], "")


def _try_v1(mounts: list[tuple[str, str, str]], own: dict[str, str]) -> tuple[list[tuple[str, Path]] | None, str]:
    bases: list[tuple[str, Path]] = []
    for ctl in ("memory", "pids"):
        points = [m[1] for m in mounts if m[0] == "cgroup" and ctl in m[2].split(",")]
        if not points or ctl not in own:
            return None, f"cgroup1: no {ctl} hierarchy mounted"
        bases.append((ctl, Path(points[0]) / own[ctl].lstrip("/")))
    why = _probe(bases, {"memory": ("memory.limit_in_bytes", "memory.oom_control"),
                         "pids": ("pids.max", "pids.events")})
    return (None, f"cgroup1: {why}") if why else (bases, "")


@lru_cache(maxsize=1)
def detect_control() -> ControlInfo:
    """The strongest level that works here (probed once per process)."""
    if os.geteuid() != 0:
        return ControlInfo("rlimits", (f"Ferry runs as uid {os.geteuid()}, not root: it cannot create cgroups",))
    mounts, own = _mounts(), _own_paths()
    reasons: list[str] = []
    for level, attempt in (("cgroup2", _try_v2), ("cgroup1", _try_v1)):
        bases, why = attempt(mounts, own)
        if bases is not None:
            sweep_stale(bases)
            return ControlInfo(level, tuple(reasons), tuple((c, str(p)) for c, p in bases))
        reasons.append(why)
    logger.info("whole-run memory/process limits unavailable (per-process rlimits only): %s", "; ".join(reasons))
    return ControlInfo("rlimits", tuple(reasons))


def _pids(d: Path) -> list[int]:
    return [int(p) for p in _read(d / "cgroup.procs").split() if p.isdigit()]


def _kill_all(dirs: list[Path], use_cgroup_kill: bool) -> int:
    """SIGKILL everything in ``dirs`` until they are empty; returns how many were alive."""
    killed: set[int] = set()
    if use_cgroup_kill:
        for d in dirs:
            alive = [p for p in _pids(d) if is_alive(p)]
            if alive and (d / "cgroup.kill").exists():
                killed.update(alive)
                try:
                    _write(d / "cgroup.kill", "1")
                except OSError as exc:
                    logger.debug("cgroup.kill in %s: %s", d, exc)
    for _ in range(KILL_ROUNDS):  # a fork racing the kill needs another round
        alive = [p for d in dirs for p in _pids(d) if is_alive(p)]
        if not alive:
            break
        for pid in alive:
            killed.add(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)
    return len(killed)


def _remove(dirs: list[Path], wait_s: float = REMOVE_WAIT_S) -> bool:
    """rmdir each (processes still exiting keep a cgroup busy for a moment)."""
    deadline = time.monotonic() + wait_s
    left = list(dirs)
    while left:
        for d in list(left):
            try:
                os.rmdir(d)
                left.remove(d)
            except FileNotFoundError:
                left.remove(d)
            except OSError:
                pass
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    for d in left:
        logger.warning("cannot remove the run's cgroup %s (still busy); a later Ferry removes it", d)
    return not left


def sweep_stale(bases: list[tuple[str, Path]] | None = None) -> list[str]:
    """Kill what is left in, and remove, the run cgroups of Ferry processes that have ended."""
    if bases is None:
        info = detect_control()
        bases = [(c, Path(p)) for c, p in info.bases]
    removed: list[str] = []
    for ctl, base in bases:
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            match = _NAME.match(name)
            if match is None or owner_alive_match(match):
                continue
            d = base / name
            _kill_all([d], ctl == "unified")
            if _remove([d], wait_s=0.5):
                removed.append(str(d))
    if removed:
        logger.info("removed %d cgroup(s) left by ended Ferry processes", len(removed))
    return removed


_live: set[RunCgroup] = set()  # created and not removed yet: ended when Ferry exits
_live_lock = threading.Lock()
_ending = False  # set by the exit handler: no new cgroups (a daemon thread may still try one)


class RunCgroup:
    """One run's cgroup(s): created with its limits, entered by its first process, ended with it."""

    def __init__(self, info: ControlInfo, dirs: list[Path]):
        self.level = info.level
        self.dirs = dirs

    @classmethod
    def create(cls, info: ControlInfo, memory_bytes: int | None, processes: int | None) -> RunCgroup:
        """The run's cgroup(s) with their limits set; OSError when the kernel refuses (nothing left)."""
        name = f"{NAME_PREFIX}-{owner_token()}-{secrets.token_hex(4)}"
        made: list[Path] = []
        group = cls(info, made)
        with _live_lock:
            if _ending:
                raise OSError(errno.ECANCELED, "Ferry is exiting")
            _live.add(group)
        try:
            for ctl, base in info.bases:
                d = Path(base) / name
                os.mkdir(d)
                made.append(d)
                _set_limits(ctl, d, memory_bytes, processes)
        except OSError:
            group.remove()
            raise
        return group

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a process writes its pid into to join the run."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def wrapper(self) -> list[str]:
        """argv prefix: a shell that puts itself (so everything it starts) into the run's cgroup(s),
        then execs the rest of the argv; exit status 125 with a message when it cannot."""
        return ["/bin/sh", "-c", _ENTER, "ferry-cgroup", *self.procs_files, "--"]

    def oom_kills(self) -> int:
        """Processes of the run the kernel killed at its memory limit."""
        name = "memory.events" if self.level == "cgroup2" else "memory.oom_control"
        return sum(_counter(d / name, "oom_kill") for d in self.dirs)

    def memory_hit(self) -> str | None:
        """``memory`` once a process of the run was OOM-killed (the supervisor then ends the run)."""
        return "memory" if self.oom_kills() else None

    def limit_hit(self) -> str | None:
        """``memory`` when the kernel OOM-killed a process of the run at its memory limit,
        ``processes`` when a fork was refused at its pids limit, else None."""
        if self.oom_kills():
            return "memory"
        return "processes" if sum(_counter(d / "pids.events", "max") for d in self.dirs) else None

    def kill_all(self) -> int:
        """SIGKILL whatever of the run is still in its cgroup(s); returns how many were alive."""
        return _kill_all(self.dirs, self.level == "cgroup2")

    def remove(self) -> None:
        """Kill what is left and remove the cgroup(s) (idempotent)."""
        with _live_lock:
            dirs, self.dirs = self.dirs, []
            _live.discard(self)
        if dirs:
            _kill_all(dirs, self.level == "cgroup2")
            _remove(dirs)


@atexit.register
def _end_all() -> None:
    """Ferry is exiting with runs still in flight (abandoned on a daemon thread): their processes
    must not outlive it, nor their cgroups stay behind."""
    global _ending
    with _live_lock:
        _ending = True
        groups = list(_live)
    for group in groups:
        group.remove()


def open_for_run(memory_bytes: int | None, processes: int | None) -> tuple[RunCgroup | None, str, tuple[str, ...]]:
    """The run's cgroup at the level in force (None at ``rlimits``), that level and why not stronger.
    A cgroup the kernel refuses for this run leaves it at ``rlimits``, saying so."""
    if memory_bytes is None and processes is None:
        return None, "rlimits", ("no whole-run memory or process limit asked for",)
    info = detect_control()
    if info.level == "rlimits":
        return None, info.level, info.reasons
    try:
        return RunCgroup.create(info, memory_bytes, processes), info.level, info.reasons
    except OSError as exc:
        logger.warning("no cgroup for this run (per-process rlimits only): %s", exc)
        return None, "rlimits", (*info.reasons, f"{info.level}: creating the run's cgroup failed: {exc.strerror}")


def _set_limits(ctl: str, d: Path, memory_bytes: int | None, processes: int | None) -> None:
    if ctl == "unified":
        if memory_bytes is not None:
            _write(d / "memory.max", str(int(memory_bytes)))
            if (d / "memory.swap.max").exists():
                _write(d / "memory.swap.max", "0")
        if processes is not None:
            _write(d / "pids.max", str(int(processes)))
    elif ctl == "memory" and memory_bytes is not None:
        _write(d / "memory.limit_in_bytes", str(int(memory_bytes)))
        if (d / "memory.memsw.limit_in_bytes").exists():  # swap accounted: no swapping past the limit
            _write(d / "memory.memsw.limit_in_bytes", str(int(memory_bytes)))
    elif ctl == "pids" and processes is not None:
        _write(d / "pids.max", str(int(processes)))


def describe_limits(level: str, memory_bytes: int | None, processes: int | None) -> str:
    """``cgroup1: memory 16 GiB, 1024 processes for the whole run``, or what the rlimits give."""
    from sandbox.sizes import format_size

    if level == "rlimits":
        return "rlimits: per process only (address space, processes of the run's uid)"
    mem = f"memory {format_size(memory_bytes)}" if memory_bytes is not None else "no memory cap"
    procs = f"{processes} processes" if processes is not None else "no process cap"
    return f"{level}: {mem}, {procs} for the whole run"
