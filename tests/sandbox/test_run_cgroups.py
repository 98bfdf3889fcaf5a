"""Whole-run memory and process limits (``sandbox.cgroups``): all of a run's processes together,
not each one on its own; the level in force is the one this machine allows, and a cgroup left by
a Ferry killed with SIGKILL is removed by the next one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sandbox import run_in_sandbox
from sandbox.cgroups import detect_control
from sandbox.procs import is_alive

from .conftest import PY, VENV_PATH, requires_bwrap, small_limits

pytestmark = requires_bwrap

CONTROL = detect_control()
requires_cgroups = pytest.mark.skipif(CONTROL.level == "rlimits",
                                      reason=f"no whole-run limits here: {CONTROL.describe()}")


def _expected_level() -> str:
    """What this machine allows, worked out from /proc without sandbox.cgroups: cgroup2 when our
    unified cgroup offers memory and pids, cgroup1 when the v1 memory and pids hierarchies are
    mounted, else rlimits (and always rlimits for a Ferry that is not root)."""
    if os.geteuid() != 0:
        return "rlimits"
    mounts = [line.split(" - ") for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    own = dict(line.split(":", 2)[1:] for line in Path("/proc/self/cgroup").read_text().splitlines())
    for left, right in mounts:
        if right.split()[0] == "cgroup2" and "" in own:
            controllers = Path(left.split()[4], own[""].lstrip("/"), "cgroup.controllers").read_text().split()
            if {"memory", "pids"} <= set(controllers):
                return "cgroup2"
    v1 = {c for left, right in mounts if right.split()[0] == "cgroup" for c in right.split()[2].split(",")}
    return "cgroup1" if {"memory", "pids"} <= v1 and "memory" in own and "pids" in own else "rlimits"


def test_the_level_in_force_is_this_machines(workspace):
    res = run_in_sandbox([PY, "-c", "pass"], workspace.path, limits=small_limits(), path_env=VENV_PATH)
    assert res.status == "ok"
    assert res.resource_control == _expected_level()
    if res.resource_control != "cgroup2":  # the reason the stronger level was not possible is kept
        assert any(r.startswith("cgroup2") for r in res.resource_control_reasons), res.resource_control_reasons


# Four processes of 80 MiB each: every one is far below its 1 GiB address-space limit, together
# they are over the run's 200 MiB.
HOGS = textwrap.dedent("""
    import subprocess, sys
    hog = "b = bytearray(80 << 20)\\nfor i in range(0, len(b), 4096): b[i] = 1\\nimport time; time.sleep(3)"
    procs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(4)]
    codes = [p.wait() for p in procs]
    print("codes", codes, flush=True)
    sys.exit(1 if any(codes) else 0)
""")


@requires_cgroups
def test_processes_together_over_the_run_memory_cap_are_stopped(workspace):
    limits = small_limits(memory_bytes=1024**3, run_memory_bytes=200 * 1024**2, timeout_s=30)
    start = time.monotonic()
    res = run_in_sandbox([PY, "-c", HOGS], workspace.path, limits=limits, path_env=VENV_PATH)
    assert res.limit_hit == "memory" and res.status == "killed", (res.stdout, res.stderr)
    assert time.monotonic() - start < 20  # ended at the kill, not at the timeout
    assert "codes [0, 0, 0, 0]" not in res.stdout


@requires_cgroups
def test_processes_within_the_run_memory_cap_run(workspace):
    limits = small_limits(memory_bytes=1024**3, run_memory_bytes=600 * 1024**2, timeout_s=30)
    res = run_in_sandbox([PY, "-c", HOGS], workspace.path, limits=limits, path_env=VENV_PATH)
    assert res.status == "ok" and res.limit_hit is None, (res.stdout, res.stderr)


FORKS = textwrap.dedent("""
    import os, time
    n = 0
    try:
        for _ in range(100):
            if os.fork() == 0:
                time.sleep(5)
                os._exit(0)
            n += 1
    finally:
        print("forked", n, flush=True)
""")


@requires_cgroups
def test_the_whole_run_process_cap_is_enforced_and_reported(workspace):
    # RLIMIT_NPROC (per uid) would allow all 100; the run's pids.max of 32 does not
    limits = small_limits(processes=512, run_processes=32)
    res = run_in_sandbox([PY, "-c", FORKS], workspace.path, limits=limits, path_env=VENV_PATH)
    assert res.limit_hit == "processes" and res.status == "killed", (res.stdout, res.stderr)
    forked = int(res.stdout.split("forked")[1].split()[0])
    assert forked < 32
    assert "Resource temporarily unavailable" in res.stderr


@requires_cgroups
def test_the_run_cgroup_is_removed_and_nothing_is_left_in_it(workspace):
    # a daemon that leaves the run's process group and session: the cgroup still holds it
    code = textwrap.dedent("""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(60)
            os._exit(0)
        time.sleep(0.5)
    """)
    base = [Path(p) for _, p in CONTROL.bases]
    before = {d: set(os.listdir(d)) for d in base}
    res = run_in_sandbox([PY, "-c", code], workspace.path, limits=small_limits(), path_env=VENV_PATH)
    assert res.status == "ok", res.stderr
    for d in base:
        left = {n for n in set(os.listdir(d)) - before[d] if n.startswith(f"ferry-{os.getpid()}-")}
        assert not left, left


@requires_cgroups
def test_a_stale_cgroup_of_a_killed_ferry_is_removed(tmp_path: Path):
    # A Ferry dies by SIGKILL while its run's cgroup holds a process: the next Ferry kills that
    # process and removes the cgroup.
    code = textwrap.dedent(f"""
        import json, os, signal, subprocess, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from sandbox.cgroups import RunCgroup, detect_control
        cg = RunCgroup.create(detect_control(), 64 << 20, 16)
        sleeper = subprocess.Popen([*cg.wrapper(), "sleep", "60"], start_new_session=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while str(sleeper.pid) not in open(cg.procs_files[0]).read():
            pass
        print(json.dumps({{"dirs": [str(d) for d in cg.dirs], "sleeper": sleeper.pid}}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    left = json.loads(proc.stdout)
    dirs = [Path(d) for d in left["dirs"]]
    assert all(d.is_dir() for d in dirs) and is_alive(left["sleeper"])
    from sandbox.cgroups import sweep_stale

    removed = sweep_stale()
    assert {str(d) for d in dirs} <= set(removed)
    assert not any(d.exists() for d in dirs)
    deadline = time.monotonic() + 5
    while is_alive(left["sleeper"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not is_alive(left["sleeper"])


def _can_make_pid_namespaces() -> bool:
    try:
        return subprocess.run(["unshare", "--pid", "--mount-proc", "--kill-child", "true"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@requires_cgroups
@pytest.mark.skipif(not _can_make_pid_namespaces(), reason="cannot make pid namespaces here (unshare --pid)")
def test_a_live_run_of_a_ferry_in_another_pid_namespace_is_not_swept():
    """A Ferry in another pid namespace shares the cgroup tree (another container, a sandbox): its
    pid, looked up in this /proc, names another process or none, so the sweep killed its live run
    and removed its cgroup."""
    # The other Ferry makes its cgroup without a sweep of its own (detect_control sweeps).
    code = textwrap.dedent(f"""
        import json, subprocess, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from sandbox import cgroups
        bases = cgroups._try_v2(cgroups._mounts(), cgroups._own_paths())[0] or \
            cgroups._try_v1(cgroups._mounts(), cgroups._own_paths())[0]
        info = cgroups.ControlInfo("cgroup1", (), tuple((c, str(p)) for c, p in bases))
        cg = cgroups.RunCgroup.create(info, 64 << 20, 16)
        sleeper = subprocess.Popen([*cg.wrapper(), "sleep", "60"], stdout=subprocess.DEVNULL)
        while not open(cg.procs_files[0]).read().split():
            pass
        print(json.dumps([str(d) for d in cg.dirs]), flush=True)
        sys.stdin.readline()
        print("alive" if sleeper.poll() is None else "killed", flush=True)
        cg.remove()
    """)
    other = subprocess.Popen(["unshare", "--pid", "--mount-proc", "--kill-child", sys.executable, "-c", code],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        dirs = [Path(d) for d in json.loads(other.stdout.readline() or "null")]
        assert all(d.is_dir() for d in dirs)
        from sandbox.cgroups import sweep_stale

        removed = sweep_stale()
        assert not {str(d) for d in dirs} & set(removed)
        assert all(d.is_dir() for d in dirs)
        other.stdin.write("\n")
        other.stdin.flush()
        assert other.stdout.readline().strip() == "alive", other.stderr.read()
        other.wait(timeout=30)
    finally:
        if other.poll() is None:
            other.kill()
            other.wait(timeout=30)


def _unified_base() -> Path | None:
    own = dict(line.split(":", 2)[1:] for line in Path("/proc/self/cgroup").read_text().splitlines())
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[0] == "cgroup2" and "" in own and os.geteuid() == 0:
            return Path(left.split()[4], own[""].lstrip("/"))
    return None


@pytest.mark.skipif(_unified_base() is None, reason="no writable cgroup2 hierarchy here")
def test_the_cgroup2_join_kill_and_remove_work_on_this_machines_unified_hierarchy():
    # This machine's cgroup2 has no memory/pids controllers (so the level is not cgroup2), but the
    # v2 mechanics a run relies on can still be exercised on it: the wrapper joins before anything
    # forks, cgroup.kill ends a process that left its session, the cgroup is removed.
    from sandbox.cgroups import ControlInfo, RunCgroup

    info = ControlInfo("cgroup2", (), (("unified", str(_unified_base())),))
    cg = RunCgroup.create(info, None, None)
    try:
        proc = subprocess.Popen([*cg.wrapper(), "/bin/sh", "-c", "setsid sleep 60 & echo $!; wait"],
                                stdout=subprocess.PIPE, text=True)
        sleeper = int(proc.stdout.readline())
        members = Path(cg.procs_files[0]).read_text().split()
        assert str(proc.pid) in members and str(sleeper) in members
        assert cg.kill_all() >= 2
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while is_alive(sleeper) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not is_alive(sleeper)
    finally:
        dirs = list(cg.dirs)
        cg.remove()
    assert not any(d.exists() for d in dirs)
