"""A planted shared library for the environment tests: ``build_hook(dir, markers)`` compiles a real ELF
shared object whose constructor writes ``markers/<pid>`` holding ``uid=<getuid()> comm=<process name>``
whenever the dynamic loader maps it (LD_PRELOAD, LD_AUDIT...), then ``markers_seen(markers)`` reads
them back. gcc is part of the development setup; tests that need it skip without it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

_SOURCE = r"""
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void ferry_planted(void) {
    char comm[64] = "?";
    int in = open("/proc/self/comm", O_RDONLY);
    if (in >= 0) {
        ssize_t n = read(in, comm, sizeof comm - 1);
        close(in);
        if (n > 0) comm[n - 1] = 0; else comm[0] = 0;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%d", MARKERS, (int)getpid());
    int out = open(path, O_WRONLY | O_CREAT | O_APPEND, 0666);
    if (out < 0) return;
    char line[160];
    int len = snprintf(line, sizeof line, "uid=%d comm=%s\n", (int)getuid(), comm);
    if (write(out, line, (size_t)len) < 0) {}
    close(out);
}
"""

requires_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build the planted library")


def build_hook(where: Path, markers: Path) -> Path:
    """``where/hook.so``, a library whose constructor leaves a marker in ``markers`` (made 0777)."""
    where.mkdir(parents=True, exist_ok=True)
    markers.mkdir(parents=True, exist_ok=True)
    markers.chmod(0o777)
    src = where / "hook.c"
    src.write_text(_SOURCE)
    lib = where / "hook.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", f'-DMARKERS="{markers}"', "-o", str(lib), str(src)],
                   check=True, capture_output=True, text=True)
    lib.chmod(0o755)
    return lib


def markers_seen(markers: Path) -> list[tuple[int, str]]:
    """(uid, process name) of every process that ran the constructor."""
    seen: list[tuple[int, str]] = []
    for f in sorted(markers.iterdir()):
        for line in f.read_text().splitlines():
            uid, _, comm = line.partition(" ")
            seen.append((int(uid.removeprefix("uid=")), comm.removeprefix("comm=")))
    return seen
