"""The run's variables reach the sandboxed program only, never a process Ferry starts on the host.

Issue 34, item 1: ``LD_PRELOAD`` in a session's options made the host's cgroup wrapper, prlimit,
bubblewrap and setpriv (and the warm interpreter) load a library of the user's as root. Here the
checks on the user's variables are bypassed on purpose (``run_in_sandbox`` is called directly with the
loader variable): a real planted library's constructor leaves a marker per process that loads it, and
the only marker allowed is the sandboxed program's, with the sandbox's uid."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import WarmServer, WarmStart, Workspace, create_workspace, detect, python_spec, run_in_sandbox
from sandbox.env import scrubbed_env
from sandbox.execute import RUN_MARKER_ENV

from .conftest import PY, VENV_PATH, requires_bwrap, small_limits
from .planted_library import build_hook, markers_seen, requires_gcc

pytestmark = requires_gcc
PROGRAM = "planted-prog"  # the sandboxed program: a copy of true under a name no host process has


@pytest.fixture
def workspace(repo: Path) -> Iterator[Workspace]:
    """A copy the run's throw-away uid can reach by path at the weaker levels too (they show it the host's
    filesystem, where pytest's temp dirs are closed to other users), as the runner's own copies are."""
    root = Path(tempfile.mkdtemp(prefix="ferry-envtest-"))
    root.chmod(0o711)
    ws = create_workspace(repo, root=root)
    ws.path.parent.chmod(0o711)
    yield ws
    ws.cleanup()
    shutil.rmtree(root, ignore_errors=True)


def _plant(workspace: Path) -> tuple[Path, Path]:
    """The library and its marker dir, both inside the workspace (the sandboxed program sees them)."""
    markers = workspace / "markers"
    lib = build_hook(workspace / "lib", markers)
    shutil.copy2(shutil.which("true") or "/bin/true", workspace / PROGRAM)
    return lib, markers


def _only_the_program(markers: Path, uid: int | None, *, reaches: bool = True) -> None:
    seen = markers_seen(markers)
    host = [(u, comm) for u, comm in seen if comm != PROGRAM or u != (os.getuid() if uid is None else uid)]
    assert not host, f"host processes ran the planted library: {host}"
    if reaches:
        assert seen, "the variable never reached the sandboxed program"


@pytest.mark.parametrize("level", [lvl for lvl in ("bwrap", "unshare", "rlimits") if lvl in detect().available])
@pytest.mark.parametrize("variable", ["LD_PRELOAD", "LD_AUDIT"])
def test_a_loader_variable_reaches_only_the_sandboxed_program(level: str, variable: str, workspace) -> None:
    lib, markers = _plant(workspace.path)
    res = run_in_sandbox([str(workspace.path / PROGRAM)], workspace.path, limits=small_limits(), isolation=level,
                         env={variable: str(lib)}, path_env=VENV_PATH)
    assert res.status == "ok", res.stderr
    # Without bubblewrap the uid drop is the last exec, as root: a loader variable is left out there (it is
    # never one a user may set), so it reaches nothing; under bubblewrap, or without a drop, the program.
    reaches = level == "bwrap" or res.uid is None
    if variable == "LD_PRELOAD":
        _only_the_program(markers, res.uid, reaches=reaches)
    else:  # LD_AUDIT: the library is no audit module (no la_version), but its constructor ran wherever loaded
        assert all(comm == PROGRAM for _, comm in markers_seen(markers)), markers_seen(markers)


@requires_bwrap
def test_a_warm_start_gives_the_placeholder_sandbox_none_of_the_runs_variables(workspace) -> None:
    """The warm path starts bubblewrap around a placeholder on the host: it gets a fixed environment; the
    forked command takes the run's variables after it joined the sandbox and gave up root."""
    lib, markers = _plant(workspace.path)
    server = WarmServer(scrubbed_env(dict(os.environ), {}, path=VENV_PATH), ["json"],
                        dynamic_keys=frozenset({RUN_MARKER_ENV, "LD_PRELOAD"}))
    try:
        assert server.wait_ready(), server.failure
        command = f"python -c \"import subprocess; subprocess.run(['{workspace.path / PROGRAM}'], check=True)\""
        spec = python_spec(command, VENV_PATH, PY)
        assert spec is not None
        res = run_in_sandbox(["/bin/sh", "-c", command], workspace.path, limits=small_limits(timeout_s=60),
                             env={"LD_PRELOAD": str(lib)}, path_env=VENV_PATH, warm=WarmStart(server, spec))
    finally:
        server.close()
    assert res.status == "ok", res.stderr
    assert res.warm, res.warm_fallback
    _only_the_program(markers, res.uid)
