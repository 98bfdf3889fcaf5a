"""Grading of a synthetic case whose migration was stopped (budget, timeout, sandbox): failed, even when
the patch it left makes the grading tests pass; a finished one is graded by its tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.migration.records import MigrationRecord
from evals import harness
from evals.cases import load_suite
from evals.grading import Graded
from evals.results import GradedTests

SUITE = Path(__file__).resolve().parent / "suite"


def _graded(monkeypatch: pytest.MonkeyPatch, *, own_ok: bool) -> None:
    tests = GradedTests(fail_to_pass={"t::f2p": "passed"}, pass_to_pass={"t::p2p": "passed"})
    monkeypatch.setattr(harness, "grade", lambda *a, **k: Graded(tests=tests, own_run_s=1.0 if own_ok else None,
                                                                 own_run_ok=own_ok))


def _record(status: str) -> MigrationRecord:
    return MigrationRecord.model_validate({"migration_id": "eval-x", "status": status, "source": "/r",
                                           "run_command": "python train.py",
                                           "parity": {"verdict": "pass", "passed": True}})


@pytest.mark.parametrize("status", ["failed_budget", "failed_timeout", "failed_sandbox"])
def test_a_stopped_migration_is_failed_whatever_its_tests_say(monkeypatch, tmp_path, status) -> None:
    _graded(monkeypatch, own_ok=False)
    (tmp_path / "ferry.patch").write_text("")
    case = next(c for c in load_suite(SUITE).cases if c.name == "tiny_placement")
    grade, reason, tests, _ = harness.grade_synthetic(case, _record(status), tmp_path)
    assert grade == "failed" and f"the migration ended {status}" in reason
    assert tests.pass_to_pass == {"t::p2p": "passed"}


def test_a_finished_migration_is_graded_by_its_tests(monkeypatch, tmp_path) -> None:
    _graded(monkeypatch, own_ok=True)
    (tmp_path / "ferry.patch").write_text("")
    case = next(c for c in load_suite(SUITE).cases if c.name == "tiny_placement")
    assert harness.grade_synthetic(case, _record("migrated"), tmp_path)[:2] == ("resolved", "")
