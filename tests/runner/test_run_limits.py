"""The runner's disk cap and whole-run limits: what a run may write in all (workspace, /tmp,
/dev/shm, its artifacts dir) is capped, going over it is a ``disk_quota`` failure with a message
saying how to raise it, results say which cap and which resource control were in force, and the
run's mount is gone afterwards."""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

import pytest

from sandbox.runspace import mount_support
from tools.runner.api import RunnerInputError, run
from tools.runner.models import RunLimits, RunRequest

pytestmark = pytest.mark.skipif(not mount_support()[0], reason=f"no run space here: {mount_support()[1]}")

CAP = 64 * 1024**2
MESSAGE = ("the run wrote more than its 64 MiB disk cap (workspace, /tmp, /dev/shm); "
           "raise it with --disk-limit or FERRY_DISK_LIMIT")


def _fill(target: str, mib: int) -> str:
    code = (f"import os, sys\nwith open(os.path.expandvars({target!r}), 'wb') as fh:\n"
            f"    for _ in range({mib}):\n        fh.write(b'x' * (1 << 20))\n")
    return f"python -c {shlex.quote(code)}"


def _own_spaces() -> list[str]:
    mine = f"ferry-space-{os.getpid()}-"
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.partition(" - ")[2].split()[1].startswith(mine)]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    src = tmp_path / "repo"
    src.mkdir()
    (src / "data.txt").write_text("original\n")
    return src


def _run(repo: Path, command: str | list[str], tmp_path: Path, disk: int | None = CAP, timeout_s: float = 60, **kw):
    limits = RunLimits(disk_bytes=disk, file_size_bytes=1024**3)
    return run(RunRequest(path=repo, command=command, device="cpu", artifacts_dir=tmp_path / "art",
                          timeout_s=timeout_s, limits=limits, **kw))


@pytest.mark.parametrize("target", ["big.bin", "/tmp/big.bin", "/dev/shm/big.bin", "$FERRY_PROBE_DIR/big.bin"])
def test_a_run_writing_past_its_cap_is_a_disk_quota(repo: Path, tmp_path: Path, target: str):
    res = _run(repo, _fill(target, 200), tmp_path, probe=True)
    assert res.status == "killed" and res.limit_hit == "disk_quota", res.stderr_tail
    assert res.trace is not None and res.trace.signature.kind == "disk_quota"
    assert res.trace.signature.detail == MESSAGE
    assert res.disk_cap == "tmpfs 64 MiB in all (workspace, /tmp, /dev/shm, run artifacts)"
    assert _own_spaces() == []  # unmounted when the run ended
    if target.startswith("$FERRY_PROBE_DIR"):  # the artifacts dir came back to the host, at most the cap
        assert res.probe_dir is not None and (res.probe_dir / "big.bin").stat().st_size < CAP


def test_the_cap_is_in_all(repo: Path, tmp_path: Path):
    res = _run(repo, f"{_fill('ws.bin', 40)} && {_fill('/tmp/t.bin', 40)}", tmp_path)
    assert res.limit_hit == "disk_quota" and res.trace is not None and res.trace.signature.kind == "disk_quota"


def test_what_the_child_writes_to_its_artifacts_dir_comes_back(repo: Path, tmp_path: Path):
    res = _run(repo, "echo rec > $FERRY_PROBE_DIR/r.txt && echo tmp > /tmp/t", tmp_path, probe=True)
    assert res.status == "ok", res.stderr_tail
    assert res.probe_dir is not None and (res.probe_dir / "r.txt").read_text() == "rec\n"
    assert res.resource_control in ("cgroup2", "cgroup1", "rlimits")
    assert _own_spaces() == []


def test_the_kept_workspace_is_copied_out_of_the_space(repo: Path, tmp_path: Path):
    script = "echo changed > data.txt && ln -s /etc/hostname link && cp /bin/true tool && chmod 4755 tool"
    res = _run(repo, script, tmp_path, keep_workspace=True)
    assert res.status == "ok", res.stderr_tail
    ws = res.workspace
    assert ws is not None and tmp_path / "art" in ws.parents
    assert (ws / "data.txt").read_text() == "changed\n"
    assert (ws / "link").is_symlink() and os.readlink(ws / "link") == "/etc/hostname"  # a link, not a copy
    assert not os.stat(ws / "tool").st_mode & stat.S_ISUID  # a copy never becomes a set-uid program
    assert os.stat(ws).st_dev == os.stat(tmp_path).st_dev  # on the host's disk, not the (gone) tmpfs
    assert _own_spaces() == []


def test_the_cap_comes_from_ferry_disk_limit_when_the_request_gives_none(repo: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("FERRY_DISK_LIMIT", "64M")
    res = _run(repo, _fill("big.bin", 100), tmp_path, disk=None)
    assert res.limit_hit == "disk_quota" and res.trace is not None and res.trace.signature.detail == MESSAGE
    monkeypatch.setenv("FERRY_DISK_LIMIT", "lots")
    with pytest.raises(RunnerInputError, match="FERRY_DISK_LIMIT='lots': 'lots' is not a size"):
        _run(repo, "true", tmp_path, disk=None)


def test_a_repository_larger_than_the_cap_is_a_clear_error(repo: Path, tmp_path: Path):
    (repo / "weights.bin").write_bytes(b"w" * (3 * 1024**2))
    with pytest.raises(RunnerInputError, match="does not fit in the run's 2 MiB disk cap"):
        _run(repo, "true", tmp_path, disk=2 * 1024**2)
    assert _own_spaces() == []


def test_an_interrupted_run_leaves_nothing_on_the_host_disk(repo: Path, tmp_path: Path):
    """Ctrl-C (or any exception) during a run: the space was closed with its default, which copies
    what the run wrote in its artifacts dir back onto the host disk with cp -a (up to the whole
    disk cap, links and owners as the run left them); nobody reads it after an interruption."""
    import _thread
    import threading
    import time

    child = tmp_path / "art" / "child"
    stop = threading.Event()

    def interrupt_once_written() -> None:
        while not stop.is_set():
            try:
                if (child / "big.bin").stat().st_size >= 20 * 1024**2:
                    _thread.interrupt_main()  # KeyboardInterrupt in the test's thread, inside run()
                    return
            except OSError:
                pass
            time.sleep(0.05)

    watcher = threading.Thread(target=interrupt_once_written, daemon=True)
    watcher.start()
    # the interrupt ends the run: its sleep and timeout only have to outlast a loaded machine's start-up
    script = f"ln -s /etc/shadow $FERRY_PROBE_DIR/../link && {_fill('$FERRY_PROBE_DIR/../big.bin', 24)} && sleep 600"
    try:
        with pytest.raises(KeyboardInterrupt):
            _run(repo, script, tmp_path, probe=True, timeout_s=600)
    finally:
        stop.set()
        watcher.join(timeout=5)
    assert _own_spaces() == []  # unmounted on the way out
    left = [p.name for p in child.iterdir()] if child.exists() else []
    assert "big.bin" not in left and "link" not in left, left


@pytest.mark.skipif(os.geteuid() != 0, reason="the run drops to a throw-away uid only when Ferry is root")
@pytest.mark.parametrize("isolation", ["unshare", "rlimits"])
def test_the_fallback_levels_run_a_script_that_writes_its_artifacts(repo: Path, tmp_path: Path, isolation: str):
    """At the unshare/rlimits levels the run has the host's filesystem and a throw-away uid: its
    workspace (in a 0700 dir of root's) and its artifacts dir (under a 0700 temp dir, or ~/.ferry)
    were out of its reach by path, so `python prog.py` failed with Permission denied before any of it
    ran, and nothing it meant to write in its probe dir could be."""
    (repo / "prog.py").write_text("import os\nopen(os.path.join(os.environ['FERRY_PROBE_DIR'], 'r.txt'), 'w')"
                                  ".write('rec')\nprint('ran')\n")
    res = _run(repo, ["python", "prog.py"], tmp_path, probe=True, isolation=isolation)
    assert res.status == "ok" and "ran" in res.stdout_tail, res.stderr_tail
    assert res.isolation == isolation
    assert res.probe_dir is not None and (res.probe_dir / "r.txt").read_text() == "rec"
    assert _own_spaces() == []
