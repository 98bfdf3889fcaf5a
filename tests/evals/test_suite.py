"""The synthetic eval suite itself (evals/suite): well-formed, covering the idiom catalogue, holding no
solutions; and a fast subset of it migrated and graded for real (the full suite is a benchmark:
`ferry eval`, tables in docs/evals.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evals.cases import IDIOM_GROUPS, SyntheticCase, load_suite
from evals.grading import validate
from evals.harness import run_suite
from evals.results import read_results
from tools.scan.api import scan
from tools.scan.models import ScanRequest

SUITE = load_suite("synthetic")
CASES = [c for c in SUITE.cases if isinstance(c, SyntheticCase)]
# The CI subset: cases of different kinds the offline policy resolves (a notebook run by a runner script,
# its CUDA code partly in a %%time cell, among them), and one it cannot (float64 science whose repo tests
# pass "cuda" to the repo's functions): that one must end with its manifest's status, never "resolved".
FAST = ["mlp_training", "host_sync_loop", "notebook_training", "scientific_float64"]
UNRESOLVED = "scientific_float64"


def test_at_least_twenty_cases_cover_every_idiom_group():
    assert len(CASES) >= 20, [c.name for c in CASES]
    covered = {g for c in CASES for g in c.idiom_groups}
    assert covered == set(IDIOM_GROUPS), sorted(set(IDIOM_GROUPS) - covered)
    assert {c.difficulty for c in CASES} == {"easy", "medium", "hard"}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_case_is_graded_by_hidden_tests_and_holds_no_solution(case: SyntheticCase):
    assert case.grading.fail_to_pass, "a case no migration can fail grades nothing"
    assert any(n.startswith("ferry_grading/") for n in case.grading.fail_to_pass), "no hidden fail-to-pass test"
    assert case.run and case.test and "pytest" in case.test
    assert not (case.repo / "ferry_grading").exists() and not list(case.repo.rglob(".git"))
    for f in case.repo.rglob("*"):
        if f.is_file() and f.suffix in {".py", ".ipynb", ".cfg", ".toml", ".ini", ".txt", ".md"}:
            text = f.read_text(encoding="utf-8")
            assert "tpx" not in text and "privateuse1" not in text.lower(), f"{f} holds migrated code"
    report = scan(ScanRequest(path=case.repo, jobs=1))
    assert report.summary.findings >= 1, f"{case.name}: the scanner finds no CUDA idiom in its repo"


@pytest.mark.slow
@pytest.mark.parametrize("name", FAST)
def test_the_fast_cases_grading_tests_mean_something(name: str, tmp_path: Path):
    """Fail-to-pass tests fail on tpx with the original code; pass-to-pass tests pass on it (CPU)."""
    case = next(c for c in CASES if c.name == name)
    v = validate(case, tmp_path, timeout_s=300)
    assert v.problems() == []
    assert v.f2p_on_tpx and "passed" not in v.f2p_on_tpx.values()


@pytest.mark.slow
def test_the_fast_subset_is_migrated_and_graded_as_expected(tmp_path: Path):
    out = tmp_path / "run"
    run_suite(SUITE.select(FAST), out, jobs=2)
    results = {r.name: r for r in read_results(out)}
    assert sorted(results) == sorted(FAST)
    for name in ("mlp_training", "host_sync_loop", "notebook_training"):
        r = results[name]
        assert (r.status, r.grade) == ("migrated", "resolved"), r.reason
        assert set(r.tests.fail_to_pass.values()) == {"passed"} and set(r.tests.pass_to_pass.values()) == {"passed"}
        assert r.parity_passed is True and r.own_run_s and r.ratio and r.iterations >= 1
    expected = next(c for c in CASES if c.name == UNRESOLVED).expected_status
    assert expected != "migrated", f"{UNRESOLVED} is resolved now: pick another case the offline policy cannot resolve"
    bad = results[UNRESOLVED]
    assert bad.status == expected and bad.grade != "resolved" and bad.reason.startswith(expected)
