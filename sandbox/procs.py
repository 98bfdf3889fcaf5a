"""Finding and killing every process of one run, including daemons that left its group."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path


def _proc_uid(pid: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def is_alive(pid: int) -> bool:
    """``pid`` exists and has not ended: a zombie (ended, not yet reaped) is not alive."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot, /proc/PID/stat field 22): with the pid, it names
    one process for good (a pid can be reused, a pid and its start time cannot)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def pid_namespace() -> int | None:
    """This process's pid namespace (the inode of /proc/self/ns/pid): what its pids are numbered in."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


# ``PID-STARTTIME-nPIDNS`` (``-nPIDNS`` missing in names older Ferry versions made)
OWNER_PATTERN = r"(\d+)-(\d+)(?:-n(\d+))?"


def owner_token(pid: int | None = None) -> str:
    """``PID-STARTTIME-nPIDNS`` of this process (or ``pid``, numbered in this process's pid namespace):
    written into the names of what a run leaves on the machine (mounts, cgroups) so that a later Ferry
    can tell whether its owner still runs."""
    pid = os.getpid() if pid is None else pid
    ns = pid_namespace()
    return f"{pid}-{start_time(pid)}" + (f"-n{ns}" if ns is not None else "")


def owner_alive(pid: int, started: int, ns: int | None = None) -> bool:
    """The process ``owner_token`` named is still running (not ended, not replaced by a reused pid).

    An owner numbered in another pid namespace (``ns``: a Ferry in another container or sandbox that
    shares the filesystem or the cgroup tree) cannot be checked from here: it counts as running, so
    what it made is never swept by a Ferry that cannot see it."""
    if ns is not None and ns != pid_namespace():
        return True
    return is_alive(pid) and start_time(pid) == started


def owner_alive_match(match: re.Match[str], first: int = 1) -> bool:
    """``owner_alive`` for a name matched with ``OWNER_PATTERN`` (its groups from ``first`` on)."""
    pid, started, ns = match.group(first, first + 1, first + 2)
    return owner_alive(int(pid), int(started), int(ns) if ns is not None else None)


def _has_marker(pid: str, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


def find_run_processes(uid: int | None, marker: str | None) -> list[int]:
    """Pids owned by the run's private uid, or carrying its environment marker."""
    me = os.getpid()
    found: list[int] = []
    mark = marker.encode() if marker else None
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        if (uid is not None and _proc_uid(entry) == uid) or (mark is not None and _has_marker(entry, mark)):
            found.append(int(entry))
    return found


def signal_run(pgid: int | None, uid: int | None, marker: str | None, sig: int) -> int:
    """Send ``sig`` to the run's process group and to every stray process of the run."""
    count = 0
    if pgid is not None:
        try:
            os.killpg(pgid, sig)
            count += 1
        except ProcessLookupError:
            pass
    for pid in find_run_processes(uid, marker):
        try:
            os.kill(pid, sig)
            count += 1
        except (ProcessLookupError, PermissionError):
            pass
    return count


def kill_run(pgid: int | None, uid: int | None, marker: str | None, *, rounds: int = 20) -> int:
    """SIGKILL until nothing of the run is left (forks racing the kill need several rounds)."""
    killed = 0
    for _ in range(rounds):
        n = signal_run(pgid, uid, marker, signal.SIGKILL)
        pgid = None if n == 0 else pgid
        stray = find_run_processes(uid, marker)
        killed += n
        if not stray:
            break
    return killed
