"""The CPU check runs only where it can change the verdict (agent.migration.nodes.cpu_check.moot): a migration
whose parity compared nothing is partial whatever the check shows, so the check is skipped with its reason
recorded; a run whose work stayed on CPU (a control program) still gets it, as the evidence that the patch
kept the program's CPU path."""

from __future__ import annotations

import json
from pathlib import Path

from agent.migration.facade import start
from agent.migration.state import MigrationOptions

NOTHING_TO_COMPARE = """import torch


def main():
    x = torch.ones(64, 64, device="cuda")
    for _ in range(3):
        x = x @ x / 64
    assert x.shape == (64, 64)


main()
"""
CPU_ONLY = NOTHING_TO_COMPARE.replace('device="cuda"', 'device="cpu"')


def _migrate(tmp_path: Path, program: str) -> dict:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text(program)
    opts = MigrationOptions(source=str(repo), run_command="python prog.py", state_dir=str(tmp_path / "state"))
    snap = start(opts, migration_id="moot")
    assert snap.outputs is not None
    return json.loads(Path(snap.outputs.result).read_text())


def test_a_cpu_check_that_cannot_change_the_verdict_is_skipped_with_its_reason(tmp_path: Path):
    result = _migrate(tmp_path, NOTHING_TO_COMPARE)
    assert result["status"] == "partial" and "parity could not be shown" in result["summary"]
    assert [r["kind"] for r in result["run_log"] if r["kind"] in ("cpu_check", "cpu_original")] == []
    check = result["cpu_check"]
    assert check["verdict"] == "skipped" and check["passed"] is None and check["run_status"] == "not run"
    assert "parity compared no tensor" in check["reason"]
    step = next(s for s in result["steps"] if s["node"] == "cpu_check")
    assert step["summary"].startswith("skipped: parity compared no tensor")


def test_a_control_whose_work_stayed_on_cpu_still_gets_its_cpu_check(tmp_path: Path):
    result = _migrate(tmp_path, CPU_ONLY)
    assert result["status"] == "partial"
    assert [r["kind"] for r in result["run_log"] if r["kind"] == "cpu_check"] == ["cpu_check"]
    assert result["cpu_check"]["verdict"] == "pass"
