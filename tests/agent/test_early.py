"""What a migration starts before its graph exists (agent.migration.early): the reference run, once, never
for a migration that already has state."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.migration import early
from agent.migration.runs import RunScheduler
from agent.migration.state import MigrationOptions

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    src = tmp_path / "repo"
    src.mkdir()
    (src / "quick.py").write_text("print('quick', 6 * 7)\n")
    return src


def _opts(repo: Path, tmp_path: Path) -> MigrationOptions:
    return MigrationOptions(source=str(repo), run_command="python quick.py", state_dir=str(tmp_path / "state"))


def test_the_reference_run_starts_once_and_is_reused_from_disk(repo: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("FERRY_PARALLEL_RUNS", "2")
    opts = _opts(repo, tmp_path)
    mid = "early-1"
    key = early.reference_key(mid)
    runs = RunScheduler()
    assert early.start_reference(runs, opts, mid)
    assert early.start_reference(runs, opts, mid)  # in flight: the same job, not a second run
    assert runs.running(f"{mid}:") == [key]
    run = runs.join(key, early.reference_artifacts(opts.state_dir, mid))
    assert run is not None and run.status == "ok" and "quick 42" in run.stdout_tail
    assert run.device == "cpu" and run.redirect_cuda == "cpu" and run.probe_dir
    # finished on disk (a resumed migration in a new process): found, not run again
    fresh = RunScheduler()
    assert not early.start_reference(fresh, opts, mid)
    assert not fresh.has(key)


def test_no_early_reference_run_when_runs_go_one_at_a_time(repo: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("FERRY_PARALLEL_RUNS", "1")
    opts = _opts(repo, tmp_path)
    runs = RunScheduler()
    assert not early.start_reference(runs, opts, "early-2")
    assert not runs.has(early.reference_key("early-2"))
    assert not early.reference_artifacts(opts.state_dir, "early-2").exists()


def test_an_existing_migration_id_starts_nothing_early(tmp_path: Path):
    # A repository without Python files: the migration ends at ingest (needs_human) but has state.
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README").write_text("no code here\n")
    sdir = tmp_path / "state"
    cmd = [sys.executable, "-m", "agent.cli", "migrate", str(empty), "--run", "python quick.py", "--json",
           "--state-dir", str(sdir), "--id", "taken-1", "--offline"]
    first = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert json.loads(first.stdout)["status"] == "needs_human", first.stderr
    ref_dir = early.reference_artifacts(sdir, "taken-1")

    def snapshot() -> dict[str, tuple[int, int, bytes]]:  # a run started again would recreate its dirs
        return {str(p): (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else b"")
                for p in [ref_dir, *ref_dir.rglob("*")] if p.exists()}

    before = snapshot()
    second = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert second.returncode == 2 and "migration taken-1 already exists" in second.stderr
    assert snapshot() == before  # the existing migration's reference artifacts were not touched
