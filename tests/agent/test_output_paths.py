"""Output paths: --out / --state-dir / --artifacts that Ferry must not write are refused with exit 2
before any work starts; write errors at the end are a named status, never a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.migration.paths import OutputPathError, check_output_dir

ROOT = Path(__file__).resolve().parents[2]
OUTPUT_NAMES = ("ferry.patch", "report.md", "result.json")


def _ferry(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    (r / "prog.py").write_text("import torch\nprint(torch.ones(2, device='cuda').sum().item())\n")
    return r


@pytest.mark.parametrize("out", ["/", "/proc/x", "/sys/ferry", "/dev", "/etc/ferry-out", "/usr", "/tmp"])
def test_system_and_shared_dirs_are_refused(out):
    with pytest.raises(OutputPathError) as info:
        check_output_dir(out, "--out")
    assert "--out" in str(info.value) and "e.g. --out" in str(info.value)


def test_a_link_to_a_system_dir_is_refused(tmp_path):
    (tmp_path / "sneaky").symlink_to("/etc")
    with pytest.raises(OutputPathError, match="inside /etc"):
        check_output_dir(tmp_path / "sneaky" / "out", "--out")


def test_usable_dirs_are_accepted_and_not_created(tmp_path):
    assert check_output_dir(tmp_path, "--out") == tmp_path.resolve()
    new = tmp_path / "a" / "b"
    assert check_output_dir(new, "--out") == new.resolve()
    assert not (tmp_path / "a").exists()  # nothing is created by the check
    assert check_output_dir(Path("/tmp") / "ferry-test-out-x", "--out") == Path("/tmp/ferry-test-out-x")
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputPathError, match="is not a directory"):
        check_output_dir(tmp_path / "file" / "out", "--out")


@pytest.mark.parametrize("out", ["/", "/proc/x"])
def test_migrate_with_a_forbidden_out_exits_2_and_writes_nothing(repo, tmp_path, out):
    before = {n: os.path.lexists(Path(out) / n) for n in OUTPUT_NAMES}
    r = _ferry("migrate", str(repo), "--run", "python prog.py", "--out", out, "--state-dir", str(tmp_path / "s"))
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "--out" in r.stderr and "system" in r.stderr
    assert {n: os.path.lexists(Path(out) / n) for n in OUTPUT_NAMES} == before
    assert not (tmp_path / "s").exists()  # refused before any work: no state, no runs


def test_unwritable_out_and_state_dir_exit_2(repo, tmp_path):
    (tmp_path / "file").write_text("x")
    r = _ferry("migrate", str(repo), "--run", "python prog.py", "--out", str(tmp_path / "file" / "out"),
               "--state-dir", str(tmp_path / "s"))
    assert r.returncode == 2 and "is not a directory" in r.stderr and "Traceback" not in r.stderr
    r = _ferry("migrate", str(repo), "--run", "python prog.py", "--state-dir", "/proc/ferry")
    assert r.returncode == 2 and "--state-dir" in r.stderr and "Traceback" not in r.stderr
    r = _ferry("resume", "x", "--state-dir", "/sys/ferry")
    assert r.returncode == 2 and "--state-dir" in r.stderr
    r = _ferry("check", str(repo), "--run", "python prog.py", "--out", "/")
    assert r.returncode == 2 and "--out" in r.stderr
    r = _ferry("run", str(repo), "--artifacts", "/proc/x", "--", "python", "prog.py")
    assert r.returncode == 2 and "--artifacts" in r.stderr


def test_read_only_out_is_refused(repo, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root to mount a read-only filesystem")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], capture_output=True).returncode:
        pytest.skip("mount is not permitted here")
    try:
        r = _ferry("migrate", str(repo), "--run", "python prog.py", "--out", str(ro / "out"),
                   "--state-dir", str(tmp_path / "s"))
        assert r.returncode == 2 and "read-only" in r.stderr, r.stderr
    finally:
        subprocess.run(["umount", str(ro)], check=True)


def test_run_without_a_command_is_a_usage_error(repo, capsys):
    from agent.cli import main

    assert main(["run", str(repo), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "no command given" in err and "usage: ferry run PATH" in err
    assert main(["run", str(repo), "--device", "cpu", "--"]) == 2
    assert "no command given" in capsys.readouterr().err
    assert main(["run", str(repo), "--device", "cpu", "python", "prog.py"]) == 2  # options, then no `--`
    assert "put the options before `--`" in capsys.readouterr().err


def test_report_write_error_is_a_named_status(repo, tmp_path):
    """An --out that became unusable by the end: failed_output with a message, the state dir's copy kept."""
    from langgraph.runtime import Runtime

    from agent.migration.graph import MigrationContext
    from agent.migration.nodes.report import report
    from agent.migration.runs import RunScheduler
    from agent.migration.state import MigrationOptions

    blocked = tmp_path / "out"
    blocked.write_text("a file where the output directory should be")
    opts = MigrationOptions(source=str(repo), run_command="python prog.py", out_dir=str(blocked),
                            state_dir=str(tmp_path / "state"))
    state = {"migration_id": "w1", "options": opts.model_dump(mode="json"), "status": "migrated",
             "summary": "runs on tpx", "files": {"prog.py": "print(1)\n"}, "runs": [], "edits": [], "steps": []}
    update = report(state, Runtime(context=MigrationContext(runs=RunScheduler())))
    assert update["status"] == "failed_output"
    assert str(blocked) in update["summary"] and "migrated" in update["summary"]
    kept = Path(update["outputs"]["dir"])
    assert kept == tmp_path / "state" / "artifacts" / "w1" / "out"
    assert all((kept / n).is_file() for n in OUTPUT_NAMES)
    assert blocked.read_text().startswith("a file")
