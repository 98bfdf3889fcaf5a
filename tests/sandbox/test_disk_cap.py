"""A run's disk cap (``sandbox.runspace``): the workspace, /tmp and /dev/shm share one size-limited
tmpfs; writing past it stops the run with ``disk_quota``, nothing of it reaches the host disk, and
the mount is gone afterwards."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sandbox import Limits, create_workspace, run_in_sandbox
from sandbox.runspace import RunSpace, open_run_space

from .conftest import PY, VENV_PATH, own_mounts, requires_bwrap, requires_mount, small_limits

pytestmark = [requires_bwrap, requires_mount]

CAP = 64 * 1024**2

# Writes TARGET in 1 MiB chunks up to MIB MiB, printing how far it got before the write failed.
WRITER = textwrap.dedent("""
    import sys
    target, mib = sys.argv[1], int(sys.argv[2])
    done = 0
    try:
        with open(target, "wb") as fh:
            for _ in range(mib):
                fh.write(b"x" * (1 << 20))
                fh.flush()
                done += 1
    finally:
        print(f"wrote {done} MiB to {target}", flush=True)
""")


def _limits(**kw) -> Limits:
    return small_limits(disk_bytes=CAP, file_size_bytes=1024**3, **kw)  # RLIMIT_FSIZE out of the way


@pytest.fixture
def space():
    sp = open_run_space(CAP)
    assert sp.mounted, sp.reason
    yield sp
    sp.close()


def _write(target: str, mib: int) -> str:
    """Shell words running WRITER (inline: nothing to copy into each workspace)."""
    return f"{PY} -c {shlex.quote(WRITER)} {target} {mib}"


def _run(space: RunSpace, repo: Path, *commands: str, isolation: str | None = None):
    ws = create_workspace(repo, root=space.workspace_root)
    script = " && ".join(commands)
    res = run_in_sandbox(["/bin/sh", "-c", script], ws.path, limits=_limits(), space=space, path_env=VENV_PATH,
                         isolation=isolation)
    return ws, res


def _written(stdout: str, target: str) -> int:
    m = re.search(rf"wrote (\d+) MiB to {re.escape(target)}", stdout)
    assert m, stdout
    return int(m.group(1))


def _assert_gone(space: RunSpace) -> None:
    root = space.root
    assert root is not None
    space.close()
    assert str(root) not in own_mounts() and not root.exists()


@pytest.mark.parametrize("target", ["big.bin", "/tmp/big.bin"])
def test_writing_past_the_cap_stops_the_run(space, repo: Path, target: str):
    ws, res = _run(space, repo, _write(target, 200))
    assert res.limit_hit == "disk_quota" and res.status == "killed", (res.stdout, res.stderr)
    assert "No space left on device" in res.stderr
    assert _written(res.stdout, target) < CAP // 1024**2
    if not target.startswith("/"):
        # the bytes went to the tmpfs (RAM), at most the cap, never to the host's disk
        written = ws.path / target
        assert written.stat().st_dev == os.stat(space.root).st_dev and written.stat().st_size <= CAP
    assert res.disk_cap == "tmpfs 64 MiB in all (workspace, /tmp, /dev/shm, run artifacts)"
    _assert_gone(space)


def test_filling_dev_shm_is_a_disk_quota(space, repo: Path):
    # a mapping of a sparse /dev/shm file: the page that does not fit any more is a SIGBUS
    ws = create_workspace(repo, root=space.workspace_root)
    code = textwrap.dedent("""
        import mmap, os
        size = 256 << 20
        fd = os.open("/dev/shm/seg", os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(fd, size)
        m = mmap.mmap(fd, size)
        for i in range(0, size, 4096):
            m[i] = 1
        print("filled")
    """)
    res = run_in_sandbox([PY, "-c", code], ws.path, limits=_limits(), space=space, path_env=VENV_PATH)
    assert res.signal == 7 and res.limit_hit == "disk_quota" and "filled" not in res.stdout, (res.stdout, res.stderr)
    _assert_gone(space)


def test_the_cap_is_for_all_areas_together(space, repo: Path):
    # 40 MiB each fit on their own; together they are over 64 MiB
    _ws, res = _run(space, repo, _write("ws.bin", 40), _write("/tmp/t.bin", 40))
    assert _written(res.stdout, "ws.bin") == 40
    assert _written(res.stdout, "/tmp/t.bin") < 40
    assert res.limit_hit == "disk_quota" and res.status == "killed"
    _assert_gone(space)


def test_a_run_within_the_cap_is_untouched(space, repo: Path):
    _ws, res = _run(space, repo, _write("ws.bin", 8), _write("/tmp/t.bin", 8),
                   _write("/dev/shm/s.bin", 8))
    assert res.status == "ok" and res.limit_hit is None, res.stderr
    assert "/dev/shm/s.bin" in res.stdout


def test_the_bound_artifacts_dir_counts_and_comes_back(space, repo: Path, tmp_path: Path):
    out = tmp_path / "child"
    out.mkdir()
    space.bind_into(out)
    ws = create_workspace(repo, root=space.workspace_root)
    script = f"echo kept > {out}/note.txt && {_write(f'{out}/big.bin', 200)}"
    res = run_in_sandbox(["/bin/sh", "-c", script], ws.path, limits=_limits(), space=space, writable=[out],
                         path_env=VENV_PATH)
    assert res.limit_hit == "disk_quota", (res.stdout, res.stderr)
    assert os.stat(out).st_dev == os.stat(space.root).st_dev  # still the space's until unbind
    space.unbind()
    assert (out / "note.txt").read_text() == "kept\n"  # copied back onto the host dir
    assert os.stat(out).st_dev != os.stat(space.root).st_dev and (out / "big.bin").stat().st_size < CAP
    _assert_gone(space)


def test_weaker_levels_keep_the_workspace_capped_and_say_so(space, repo: Path):
    # python exec'ed directly: at the weaker levels the run's uid may not reach an interpreter
    # below /root through a shell's path lookup (this container's pyenv)
    ws = create_workspace(repo, root=space.workspace_root)
    res = run_in_sandbox([PY, "-c", WRITER, "big.bin", "200"], ws.path, limits=_limits(), space=space,
                         path_env=VENV_PATH, isolation="unshare")
    assert res.limit_hit == "disk_quota" and _written(res.stdout, "big.bin") < 64, (res.stdout, res.stderr)
    assert "/tmp and /dev/shm are the host's at isolation unshare" in res.disk_cap
    assert res.disk_cap.startswith("tmpfs 64 MiB in all (workspace, run artifacts)")


def test_without_a_space_tmp_and_shm_are_capped_each(workspace):
    res = run_in_sandbox([PY, "-c", "open('/dev/shm/x', 'wb').write(b'x' * (100 << 20))"], workspace.path,
                         limits=_limits(), path_env=VENV_PATH)
    assert res.status == "failed" and "No space left on device" in res.stderr
    assert res.disk_cap.startswith("/tmp and /dev/shm: tmpfs 64 MiB each; workspace: files up to 1 GiB each")


def test_a_stale_space_of_a_killed_ferry_is_unmounted(tmp_path: Path):
    # A Ferry that dies by SIGKILL with a run space (and a bind of it) mounted: the next one cleans up.
    out = tmp_path / "child"
    out.mkdir()
    code = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from sandbox.runspace import open_run_space
        sp = open_run_space(16 << 20)
        sp.bind_into({str(out)!r})
        print(sp.root, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    root = Path(proc.stdout.strip())
    mounted = [line.split(" - ")[0].split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    assert str(root) in mounted and str(out) in mounted  # left behind
    from sandbox.runspace import sweep_stale
    from sandbox.workspace import default_root

    bare = default_root() / f"ferry-space-{root_pid(str(root))}-1-deadbeef"  # a mount point without its mount
    bare.mkdir()
    cleaned = sweep_stale()
    with open_run_space(16 << 20) as ours:
        sweep_stale()
        assert str(ours.root) in own_mounts()  # a running Ferry's space is never swept
    assert str(root) in cleaned and str(out) in cleaned
    mounted = [line.split(" - ")[0].split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    assert str(root) not in mounted and str(out) not in mounted and not root.exists() and not bare.exists()


def _can_make_pid_namespaces() -> bool:
    try:
        return subprocess.run(["unshare", "--pid", "--mount-proc", "--kill-child", "true"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _can_make_pid_namespaces(), reason="cannot make pid namespaces here (unshare --pid)")
def test_a_live_space_of_a_ferry_in_another_pid_namespace_is_not_swept(tmp_path: Path, monkeypatch):
    """A Ferry in another pid (and mount) namespace sharing the workspace root: its mount is not in
    this mountinfo, so its mount point looked like an empty directory of an ended Ferry, and the
    sweep's rmdir of it detached the live space where that Ferry runs (the kernel allows removing a
    mount point of another mount namespace)."""
    monkeypatch.setenv("FERRY_WORKSPACE_ROOT", str(tmp_path / "root"))
    (tmp_path / "root").mkdir()
    # The other Ferry mounts its space without a sweep of its own (open_run_space sweeps).
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from pathlib import Path
        from sandbox import runspace
        point = runspace._mount_tmpfs(Path({str(tmp_path / "root")!r}), 16 << 20)
        (point / "marker").write_text("live")
        print(point, flush=True)
        sys.stdin.readline()
        print("intact" if (point / "marker").exists() else "gone", flush=True)
        runspace._unmount(point)
        os.rmdir(point)
    """)
    other = subprocess.Popen(["unshare", "--pid", "--mount-proc", "--kill-child", sys.executable, "-c", code],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        point = Path(other.stdout.readline().strip())
        assert point.is_dir() and not any(point.iterdir()), other.stderr.read()  # empty from here
        from sandbox.runspace import sweep_stale

        sweep_stale()
        assert point.is_dir()
        other.stdin.write("\n")
        other.stdin.flush()
        assert other.stdout.readline().strip() == "intact", other.stderr.read()
        other.wait(timeout=30)
    finally:
        if other.poll() is None:
            other.kill()
            other.wait(timeout=30)


def test_a_ferry_exiting_mid_run_leaves_no_mount_and_no_cgroup(tmp_path: Path, repo: Path):
    # The run goes on on a daemon thread (as an abandoned background run does) when Ferry exits:
    # its space and its cgroup are released at exit, its processes end.
    code = textwrap.dedent(f"""
        import sys, threading, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from pathlib import Path
        from sandbox import Limits, create_workspace, open_run_space, run_in_sandbox
        sp = open_run_space(16 << 20)
        ws = create_workspace(Path({str(repo)!r}), root=sp.workspace_root)
        threading.Thread(target=run_in_sandbox, args=(["sleep", "60"], ws.path),
                         kwargs=dict(space=sp, limits=Limits(disk_bytes=16 << 20)), daemon=True).start()
        time.sleep(1.5)
        print(sp.root, flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    root, pid = proc.stdout.strip(), root_pid(proc.stdout.strip())
    mounts = Path("/proc/self/mountinfo").read_text()
    assert f"ferry-space-{pid}-" not in mounts and not Path(root).exists()
    from sandbox.cgroups import detect_control

    for _, base in detect_control().bases:
        assert not [n for n in os.listdir(base) if n.startswith(f"ferry-{pid}-")]
    sleepers = subprocess.run(["pgrep", "-f", "^sleep 60$"], capture_output=True, text=True).stdout.split()
    assert not [p for p in sleepers if f"ferry-{pid}-" in Path(f"/proc/{p}/cgroup").read_text(errors="replace")]


def root_pid(root: str) -> int:
    """The owner pid in a run space's name (``ferry-space-PID-START-RANDOM``)."""
    return int(Path(root).name.split("-")[2])


@pytest.mark.parametrize("text", ["99999999999999999999999T", "2000T", str(2**51)])
def test_a_disk_cap_past_any_host_is_refused(text: str) -> None:
    """Second reader: such a cap was accepted and the run started with it."""
    from sandbox.limits import parse_size

    with pytest.raises(ValueError, match="more than any host has: give at most 1024T"):
        parse_size(text)
    assert parse_size("1024T") == 2**50
