"""The mounts this process sees (``/proc/self/mountinfo``), parsed once for the run space and cgroups."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Mount:
    root: str  # the mounted directory inside its filesystem ("/" for a whole filesystem, "/x" for a bind of x)
    point: str  # where it is mounted
    fstype: str
    source: str
    super_options: str  # the filesystem's own options (cgroup v1: its controllers)


def _unescape(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def mounts() -> list[Mount]:
    """Every mount of this process's mount namespace, in mount order (fields unescaped)."""
    out: list[Mount] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if len(f) >= 5 and len(r) >= 2:
            out.append(Mount(_unescape(f[3]), _unescape(f[4]), r[0], _unescape(r[1]), r[2] if len(r) >= 3 else ""))
    return out
