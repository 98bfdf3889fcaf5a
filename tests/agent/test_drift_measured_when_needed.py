"""Issue 29: the side runs that measure where an admitted drift comes from are made only where they can change
the outcome. A parity that passed by the drift budget of the later training steps stays a pass whatever they
measure, so the parity node leaves them out (the report says so, and how to ask for them: --explain-drift);
when the tests then fail, ``diagnose`` makes them before the policy reads them, so the policy's
FIX008-after-drift rule still gets its measurement and the migration ends as it did before.

In process, with the comparison and the side runs stubbed: nothing here runs a program.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langgraph.runtime import Runtime

from agent.migration.graph import MigrationContext
from agent.migration.nodes import causes, diagnose, parity
from agent.migration.render import parity_section
from agent.migration.runs import RunScheduler
from agent.migration.state import MigrationOptions, dump, parity_of
from agent.policy.base import Diagnosis, UserFrame
from tools.parity.models import CauseTrial, DriftSummary, ParityReport
from tools.runner.models import RunResult

TRAIN = "import torch\n\nmodel = torch.nn.Linear(4, 4).cuda()\nprint(model(torch.ones(4).cuda()).sum().item())\n"


def _run(probe: Path | None, status: str = "ok") -> RunResult:
    if probe is not None:
        probe.mkdir(parents=True, exist_ok=True)
    return RunResult(command=["python", "train.py"], exit_code=0 if status == "ok" else 1, status=status,  # type: ignore[arg-type]
                     duration_s=1.0, stdout_tail="", stderr_tail="", isolation="none", probe_dir=probe)


def _drifted() -> ParityReport:
    drift = DriftSummary(growth=2.0, cap=0.05, e0=1e-4, judged=3, within=3, worst_key="Net.fc#1:out",
                         worst_eps=2e-3, worst_budget=1e-2)
    return ParityReport(verdict="pass", summary="parity PASS", ref_dir="/r", target_dir="/t", counts={"pass": 9},
                        modules=[], tensors=[], scalars=[], drift=drift)


def _trial() -> CauseTrial:
    return CauseTrial(cause="matmul_precision", setting="'highest' (TPX_MATMUL_PRECISION=highest)",
                      env={"TPX_MATMUL_PRECISION": "highest"}, against="reference", verdict="pass",
                      before_key="Net.fc#1:out", before_max_abs=2e-3, after_max_abs=0.0, drift=True)


@pytest.fixture
def side_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """causes.explain_drift stubbed: each call is listed, and it measures 'highest' taking the drift away."""
    calls: list[str] = []

    def explain(state: Any, report: ParityReport, ref_dir: Path, golden_dir: Path | None,
                changes: dict[str, str]) -> tuple[list[CauseTrial], list[dict[str, object]]]:
        calls.append(str(ref_dir))
        return [_trial()], [{"kind": "cause_trial", "status": "ok", "duration_s": 1.0}]

    monkeypatch.setattr(causes, "explain_drift", explain)
    monkeypatch.setattr(parity.adapters, "compare", lambda *a, **k: _drifted())
    return calls


def _state(tmp_path: Path, **opts: Any) -> dict[str, Any]:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    (repo / "train.py").write_text(TRAIN)
    options = MigrationOptions(source=str(repo), run_command="python train.py", state_dir=str(tmp_path / "state"),
                               test_command="python -m pytest -q", **opts)
    tgt = _run(tmp_path / "target" / "probe")
    return {"migration_id": "drift", "options": options.model_dump(mode="json"),
            "reference": dump(_run(tmp_path / "reference" / "probe")), "target_ok": dump(tgt), "last_run": dump(tgt),
            "runs": [], "edits": [], "steps": [], "iteration": 0, "files": {}}


def _node(fn: Any, state: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = fn(state, Runtime(context=MigrationContext(runs=RunScheduler())))
    return result


def test_a_pass_by_the_drift_budget_makes_no_side_run_and_says_it_was_not_measured(tmp_path: Path,
                                                                                   side_runs: list[str]) -> None:
    update = _node(parity.parity, _state(tmp_path))
    assert side_runs == []  # no cause_trial run on a passing verdict
    assert "runs" not in update and "status" not in update  # the verdict is parity's pass, nothing else
    report = parity_of(update)
    assert report is not None and report.passed and report.trials == [] and report.drift_measured is False
    assert "measured only if the tests fail (or with --explain-drift)" in update["steps"][-1]["summary"]
    assert "not measured (--explain-drift)" in report.headline()
    assert any("--explain-drift" in line for line in parity_section(report))


def test_explain_drift_measures_it_in_the_parity_node_as_before(tmp_path: Path, side_runs: list[str]) -> None:
    update = _node(parity.parity, _state(tmp_path, explain_drift=True))
    assert side_runs == [str(tmp_path / "reference" / "probe")]
    report = parity_of(update)
    assert report is not None and report.passed and report.drift_measured is True
    assert [t.cause for t in report.trials] == ["matmul_precision"]
    assert [r["kind"] for r in update["runs"]] == ["cause_trial"]
    assert "measured: with" in update["steps"][-1]["summary"] and "--explain-drift" not in report.headline()


def test_failing_tests_after_an_unmeasured_drift_measure_it_and_get_the_same_fix(
        tmp_path: Path, side_runs: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    state = _state(tmp_path)
    state.update(_node(parity.parity, state))
    assert side_runs == []
    failed = _run(None, status="failed")
    state.update({"last_run": dump(failed), "last_phase": "test"})
    # the failing tests' trace as the runner would parse it: an assertion in a test module
    monkeypatch.setattr(diagnose, "diagnosis_from_run", lambda run, phase, known: Diagnosis(
        phase="test", kind="other", frames=[UserFrame(file="tests/test_x.py", line=3)]))
    update = _node(diagnose.diagnose, state)
    assert len(side_runs) == 1  # made now: the policy's rule reads their measurement
    assert update["proposal"] is not None and update["proposal"]["rule"] == "matmul_precision_highest"
    assert "status" not in update
    measured = parity_of(update)
    assert measured is not None and measured.drift_measured is True and measured.trials[0].drift
    assert [r["kind"] for r in update["runs"]] == ["cause_trial"]


def test_failing_tests_after_a_measured_drift_make_no_second_side_run(
        tmp_path: Path, side_runs: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    state = _state(tmp_path, explain_drift=True)
    state.update(_node(parity.parity, state))
    state.update({"last_run": dump(_run(None, status="failed")), "last_phase": "test"})
    monkeypatch.setattr(diagnose, "diagnosis_from_run", lambda run, phase, known: Diagnosis(
        phase="test", kind="other", frames=[UserFrame(file="tests/test_x.py", line=3)]))
    update = _node(diagnose.diagnose, state)
    assert len(side_runs) == 1 and "runs" not in update
    assert update["proposal"] is not None and update["proposal"]["rule"] == "matmul_precision_highest"
