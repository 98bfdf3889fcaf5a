"""The migration's wall-time budget (--max-wall): runs are capped by what is left, and a run that cannot
finish in it is not started; the migration then ends failed_budget with its report, saying why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from agent.errors import BudgetExhausted
from agent.migration.budget import ensure_time_for, expected_run_s, has_time_for, run_timeout, time_left
from agent.migration.records import RunRecord, RunRole
from agent.migration.state import MigrationOptions, dump


def _state(max_wall: float | None, elapsed: float, runs: list[tuple[str, str, float]] = ()) -> dict:
    opts = MigrationOptions(source="/repo", run_command="python x.py", state_dir="/state", run_timeout_s=600,
                            max_wall_s=max_wall)
    records = [dump(RunRecord(kind=k, command=["python"], status=s, duration_s=d, isolation="bwrap"))  # type: ignore[arg-type]
               for k, s, d in runs]
    return {"options": dump(opts), "elapsed_s": elapsed, "runs": records}


def test_without_a_budget_runs_get_the_run_timeout_and_always_start():
    st = _state(None, 10_000.0, [("reference", "ok", 5_000.0)])
    assert time_left(st) is None and run_timeout(st) == 600
    assert has_time_for(st, "target")
    ensure_time_for(st, "target", "the target run")  # does not raise


def test_a_runs_timeout_is_capped_by_what_the_budget_leaves():
    assert run_timeout(_state(1000.0, 100.0)) == 600  # the run timeout is the smaller
    assert run_timeout(_state(1000.0, 700.0)) == pytest.approx(300, abs=1)
    assert run_timeout(_state(1000.0, 1200.0)) == 1.0  # never below the runner's minimum


def test_the_expected_duration_comes_from_the_runs_like_it():
    st = _state(1000.0, 0.0, [("reference", "ok", 40.0), ("target", "failed", 1.0), ("target", "ok", 25.0),
                              ("tests", "ok", 7.0)])
    assert expected_run_s(st, "target") == (25.0, "the last target run")
    assert expected_run_s(st, "tests") == (7.0, "the last tests run")
    assert expected_run_s(st, "cpu_check") == (40.0, "the last reference run")
    assert expected_run_s(_state(1000.0, 0.0, [("target", "failed", 3.0)]), "target") is None  # failed runs say nothing


def test_every_run_role_has_runs_it_is_expected_to_take_as_long_as():
    """``RunRole`` names every kind of run (the evidence run and the golden run too): asking how long any of
    them will take never fails; an evidence run is expected to take what a target run would (at most)."""
    st = _state(1000.0, 0.0, [("reference", "ok", 40.0), ("evidence", "ended", 3.0)])
    for role in get_args(RunRole):
        expected_run_s(st, role)  # no KeyError
    assert expected_run_s(st, "evidence") == (40.0, "the last reference run")
    assert expected_run_s(st, "golden") == (40.0, "the last reference run")


def test_a_run_longer_than_the_time_left_is_not_started():
    st = _state(300.0, 250.0, [("reference", "ok", 80.0)])
    assert not has_time_for(st, "target")
    with pytest.raises(BudgetExhausted) as exc:
        ensure_time_for(st, "target", "the target run of iteration 1")
    msg = str(exc.value)
    assert exc.value.status == "failed_budget"
    assert "50s of --max-wall 300s left; the last reference run took 80s" in msg
    assert "the target run of iteration 1 would not finish and was not started" in msg and "larger --max-wall" in msg
    # the same run with enough time left starts
    assert has_time_for(_state(300.0, 150.0, [("reference", "ok", 80.0)]), "target")
    # nothing like it ran yet: it starts while any time is left, not once the budget is spent
    assert has_time_for(_state(300.0, 250.0), "tests") and not has_time_for(_state(300.0, 300.0), "tests")


# fast on CPU (the reference run, CUDA redirected there), slow on the device: the budget runs out in the target run
SLOW = ("import time\nimport torch\n\nx = torch.ones(4, device='cuda')\nif x.device.type != 'cpu':\n"
        "    time.sleep(20)\nprint('loss', float(x.sum()))\n")


def test_a_migration_that_cannot_finish_in_its_budget_ends_failed_budget_with_its_report(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text(SLOW)
    proc = subprocess.run([sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run",
                           "python prog.py", "--json", "--offline", "--state-dir", str(tmp_path / "state"),
                           "--out", str(tmp_path / "out"), "--max-wall", "8"],
                          capture_output=True, text=True, timeout=300)
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["status"] == "failed_budget", (result["summary"], proc.stderr[-2000:])
    assert "wall-time budget" in result["summary"] and "--max-wall 8s" in result["summary"]
    # stopped by the budget, long before the run would have ended by itself (20 s), with what was shown kept
    targets = [r for r in result["run_log"] if r["kind"] == "target"]
    assert all(r["duration_s"] < 12 for r in targets), targets
    assert (tmp_path / "out" / "report.md").is_file()
    assert (repo / "prog.py").read_text() == SLOW  # the user's repository is untouched


def test_the_cli_refuses_a_budget_that_is_not_positive(tmp_path: Path):
    proc = subprocess.run([sys.executable, "-m", "agent.cli", "migrate", str(tmp_path), "--run", "python x.py",
                           "--max-wall", "0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "argument --max-wall: must be a finite number above 0, got '0'" in proc.stderr
