"""Shared helpers for the sandbox tests: small limits so every hostile program ends fast."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sandbox import Limits, create_workspace, detect, run_in_sandbox

PY = sys.executable
VENV_PATH = f"{Path(sys.prefix) / 'bin'}:/usr/bin:/bin"


def small_limits(**kw) -> Limits:
    base = dict(timeout_s=10.0, memory_bytes=1 * 1024**3, processes=64, file_size_bytes=16 * 1024**2,
                open_files=256, output_bytes=8 * 1024, output_kill_bytes=64 * 1024**2, disk_bytes=64 * 1024**2)
    base.update(kw)
    return Limits(**base)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    src = tmp_path / "repo"
    src.mkdir()
    (src / "data.txt").write_text("original\n")
    return src


@pytest.fixture
def workspace(repo: Path, tmp_path: Path):
    ws = create_workspace(repo, root=tmp_path / "ws")
    yield ws
    ws.cleanup()


@pytest.fixture
def run_py(workspace):
    """Run a Python snippet in the sandbox: run_py(code, isolation=None, **limits)."""

    def _run(code: str, isolation: str | None = None, env: dict | None = None, **limits):
        return run_in_sandbox([PY, "-c", code], workspace.path, limits=small_limits(**limits),
                              isolation=isolation, env=env, path_env=VENV_PATH)

    return _run


requires_bwrap = pytest.mark.skipif("bwrap" not in detect().available, reason="bubblewrap cannot run here")


def mount_reason() -> str:
    from sandbox.runspace import mount_support

    return mount_support()[1]


requires_mount = pytest.mark.skipif(bool(mount_reason()), reason=f"no run space here: {mount_reason()}")


def own_mounts(prefix: str = "ferry-space-") -> list[str]:
    """Mount points of this process's run spaces (and their binds) still mounted."""
    mine = f"{prefix}{os.getpid()}-"
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[1].startswith(mine):
            out.append(left.split()[4])
    return out
