"""The test guard's graph side (agent.migration.nodes.guard), in process: an edit is read against the text the
migration holds now (an earlier edit's), a removed test the reference did not pass is no finding, and a lost
test an approved finding explains is not asked about again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.migration.nodes import guard
from agent.migration.records import GuardEvent
from agent.migration.state import MigrationOptions, dump
from tools.guard.models import TestsSnapshot
from tools.trace.models import TestOutcome as Ran

TESTS = "def test_a():\n    assert 1\n\n\ndef test_b():\n    assert 2\n"


def _state(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    (repo / "test_x.py").write_text(TESTS)
    opts = MigrationOptions(source=str(repo), run_command="python x.py", test_command="python -m pytest -q",
                            state_dir=str(tmp_path / "state"))
    return {"migration_id": "m1", "options": opts.model_dump(mode="json"), **extra}


def _snap(**outcomes: str) -> dict[str, Any]:
    return dump(TestsSnapshot.of([Ran(nodeid=f"test_x.py::{n}", outcome=o) for n, o in outcomes.items()]))  # type: ignore[arg-type]


def test_an_edit_is_read_against_the_migrations_current_text(tmp_path: Path):
    looser = TESTS.replace("    assert 2\n", "    assert 2\n    assert 3\n")
    state = _state(tmp_path, files={"test_x.py": looser})
    # against the original, dropping `assert 3` would be no change; against the current text it lowers test_b's
    assert [(f.rule, f.test) for f in guard.static_check(state, {"test_x.py": TESTS}).findings] == [
        ("GRD003", "test_b")]


def test_a_removed_test_counts_only_when_the_reference_passed_it(tmp_path: Path):
    without_b = TESTS.split("\n\n\n")[0] + "\n"
    failed_b = _state(tmp_path, reference_tests=_snap(test_a="passed", test_b="failed"))
    assert guard.static_check(failed_b, {"test_x.py": without_b}).findings == []
    passed_b = _state(tmp_path, reference_tests=_snap(test_a="passed", test_b="passed"))
    assert [f.rule for f in guard.static_check(passed_b, {"test_x.py": without_b}).findings] == ["GRD001"]


def test_a_lost_test_an_approval_explains_is_not_a_finding_again(tmp_path: Path):
    after = TestsSnapshot.of([Ran(nodeid="test_x.py::test_a", outcome="passed")])
    base = _state(tmp_path, reference_tests=_snap(test_a="passed", test_b="passed"))
    assert [(f.rule, f.test) for f in guard.dynamic_check(base, after)] == [("GRD007", "test_b")]
    removal = dump(GuardEvent(decision="accepted", rule="GRD001", site="test_x.py:5", test="test_b", detail="gone"))
    assert guard.dynamic_check({**base, "guard": [removal]}, after) == []
    other = dump(GuardEvent(decision="accepted", rule="GRD001", site="test_x.py:1", test="test_a", detail="gone"))
    refused = dump(GuardEvent(decision="refused", rule="GRD001", site="test_x.py:5", test="test_b", detail="gone"))
    assert [f.test for f in guard.dynamic_check({**base, "guard": [other, refused]}, after)] == ["test_b"]
    collection = dump(GuardEvent(decision="accepted", rule="GRD006", site="conftest.py:1", detail="changed"))
    assert guard.dynamic_check({**base, "guard": [collection]}, after) == []
    assert guard.dynamic_check(_state(tmp_path), after) == []  # no reference: nothing to hold them to


MATMUL_TEST = '''import torch


def test_two_matmul_orders_agree():
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(32, 32, generator=g) for _ in range(3))
    torch.testing.assert_close((a @ b) @ c, a @ (b @ c), rtol=1e-4, atol=1e-4)
'''


def test_the_policys_precision_fix_in_a_test_module_is_the_documented_exception(tmp_path: Path):
    from agent.policy import Proposal, propose
    from agent.policy.base import Diagnosis, FixContext, UserFrame

    state = _state(tmp_path)
    repo = Path(state["options"]["source"])
    (repo / "tests").mkdir()
    (repo / "tests" / "test_mm.py").write_text(MATMUL_TEST)
    message = ("Tensor-likes are not close!\n\nMismatched elements: 14 / 16 (87.5%)\n"
               "Greatest absolute difference: 0.00043 at index (1, 0) (up to 1e-05 allowed)\n"
               "Greatest relative difference: 0.0038 at index (3, 1) (up to 0.0001 allowed)")
    diag = Diagnosis(phase="test", kind="other", exc_type="AssertionError", message=message,
                     frames=[UserFrame(file="tests/test_mm.py", line=7, function="test_two_matmul_orders_agree")])
    proposal = propose(diag, FixContext(source=repo, known_files=["tests/test_mm.py"]))
    assert isinstance(proposal, Proposal) and proposal.rule == "test_tolerance_matmul_precision"
    found = guard.static_check(state, proposal.files)
    assert found.findings == []
    assert [(n.rule, n.file) for n in found.notes] == [("FIX008", "tests/test_mm.py")]
    assert guard.event(found.notes[0], "exception", "fix-1")["decision"] == "exception"
