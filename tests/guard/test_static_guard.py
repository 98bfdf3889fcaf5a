"""The static test guard (tools.guard.static): each kind of weakening is found with its rule and site; edits
that do not weaken the tests (a tighter tolerance, a new assertion, FIX008's precision line) pass."""

from __future__ import annotations

import pytest

from tools.codemods.fixes import target_matmul_precision
from tools.guard.models import FileEdit, GuardRequest, TestsSnapshot
from tools.guard.outcomes import lost_tests
from tools.guard.static import check_patch
from tools.trace.models import TestOutcome as Ran

TESTS = '''import math

import pytest
import torch


def scale(x):
    return 2 * x


def test_scale_matches():
    x = torch.ones(3)
    torch.testing.assert_close(scale(x), torch.full((3,), 2.0), atol=1e-6, rtol=1e-6)


def test_scale_of_zero():
    assert scale(0) == 0
    assert math.isclose(scale(1.5), 3.0, rel_tol=1e-9)


class TestScale:
    def test_negative(self):
        assert scale(-1) == -2
'''


def _check(after: str, before: str = TESTS, path: str = "tests/test_scale.py", passed: list[str] | None = None):
    return check_patch(GuardRequest(files=[FileEdit(path=path, before=before, after=after)],
                                    passed_on_reference=passed))


def _rules(after: str, **kw) -> list[tuple[str, str, str | None]]:
    return [(f.rule, f.site, f.test) for f in _check(after, **kw).findings]


REMOVED = TESTS.replace('''def test_scale_of_zero():
    assert scale(0) == 0
    assert math.isclose(scale(1.5), 3.0, rel_tol=1e-9)


''', "")


@pytest.mark.parametrize(("after", "expected"), [
    (REMOVED, [("GRD001", "tests/test_scale.py:16", "test_scale_of_zero")]),
    # renamed out of collection is removed too
    (TESTS.replace("def test_scale_of_zero", "def check_scale_of_zero"),
     [("GRD001", "tests/test_scale.py:16", "test_scale_of_zero")]),
    (TESTS.replace("def test_scale_matches", "@pytest.mark.skip(reason='flaky on tpx')\ndef test_scale_matches"),
     [("GRD002", "tests/test_scale.py:11", "test_scale_matches")]),
    (TESTS.replace("    x = torch.ones(3)\n", "    pytest.xfail('tpx')\n    x = torch.ones(3)\n"),
     [("GRD002", "tests/test_scale.py:12", "test_scale_matches")]),
    (TESTS + "\npytestmark = pytest.mark.skipif(True, reason='x')\n", [("GRD002", "tests/test_scale.py:25", None)]),
    (TESTS.replace("    assert scale(0) == 0\n", ""), [("GRD003", "tests/test_scale.py:16", "test_scale_of_zero")]),
    (TESTS.replace("atol=1e-6", "atol=1"), [("GRD004", "tests/test_scale.py:13", "test_scale_matches")]),
    (TESTS.replace("rel_tol=1e-9", "rel_tol=0.5"), [("GRD004", "tests/test_scale.py:18", "test_scale_of_zero")]),
    (TESTS.replace("        assert scale(-1) == -2", "        try:\n            assert scale(-1) == -2\n"
                   "        except Exception:\n            pass"),
     [("GRD005", "tests/test_scale.py:23", "TestScale.test_negative")]),
])
def test_each_weakening_is_refused_with_its_rule_and_site(after: str, expected: list[tuple[str, str, str | None]]):
    assert _rules(after) == expected


@pytest.mark.parametrize("after", [
    TESTS.replace("atol=1e-6", "atol=1e-8"),  # tighter
    TESTS.replace("atol=1e-6", "atol=1e-5"),  # looser, within the policy's fp32 atol
    TESTS.replace("rtol=1e-6", "rtol=1e-2"),  # looser, within the policy's loosest rtol (bf16's 1.6e-2)
    TESTS.replace("    assert scale(0) == 0\n", "    assert scale(0) == 0\n    assert scale(1) == 2\n"),
    TESTS.replace("torch.ones(3)", 'torch.ones(3, device="tpx")'),  # a device change, nothing weaker
    # an except that re-raises does not swallow
    TESTS.replace("        assert scale(-1) == -2", "        try:\n            assert scale(-1) == -2\n"
                  "        except AssertionError:\n            raise"),
])
def test_edits_that_do_not_weaken_the_tests_pass(after: str):
    assert _rules(after) == []


def test_a_removed_test_that_did_not_pass_on_the_reference_is_not_a_finding():
    passed = ["tests/test_scale.py::test_scale_matches", "tests/test_scale/TestScale.py::test_negative"]
    assert _rules(REMOVED, passed=passed) == []
    assert _rules(REMOVED, passed=[*passed, "tests/test_scale.py::test_scale_of_zero"])[0][0] == "GRD001"


def test_fix008_in_a_test_module_is_the_documented_exception():
    new = target_matmul_precision(TESTS, filename="tests/test_scale.py").source
    assert new != TESTS
    result = _check(new)
    assert result.findings == []
    assert [(n.rule, n.file) for n in result.notes] == [("FIX008", "tests/test_scale.py")]


def test_collection_changes_in_conftest_and_the_configuration_files_are_refused():
    result = check_patch(GuardRequest(files=[
        FileEdit(path="conftest.py", before="import pytest\n", after="import pytest\n\ncollect_ignore = ['tests']\n"),
        FileEdit(path="tests/conftest.py", before="def pytest_collection_modifyitems(items):\n    pass\n",
                 after="def pytest_collection_modifyitems(items):\n    items.clear()\n"),
        FileEdit(path="pytest.ini", before="[pytest]\naddopts = -q\n",
                 after="[pytest]\naddopts = -q --deselect tests/test_scale.py::test_scale_matches\n"),
        FileEdit(path="setup.cfg", before="[metadata]\nname = x\n", after="[metadata]\nname = x\n\n[tool:pytest]\n"
                                                                         "addopts = --ignore=tests\n"),
        FileEdit(path="pyproject.toml", before='[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
                 after='[tool.pytest.ini_options]\ntestpaths = ["other"]\n'),
        # a conftest fixture and the rest of a configuration file are not collection
        FileEdit(path="tests/conftest.py2", before="", after="x = 1\n"),
        FileEdit(path="setup.cfg.bak", before="", after="[tool:pytest]\n"),
    ]))
    assert [(f.rule, f.site) for f in result.findings] == [
        ("GRD006", "conftest.py:3"), ("GRD006", "tests/conftest.py:1"), ("GRD006", "pytest.ini:1"),
        ("GRD006", "setup.cfg:4"), ("GRD006", "pyproject.toml:1")]
    fixture = check_patch(GuardRequest(files=[FileEdit(
        path="conftest.py", before="import pytest\n",
        after="import pytest\n\n\n@pytest.fixture\ndef dev():\n    return 'tpx'\n")]))
    assert fixture.findings == []


def test_a_test_that_passed_on_the_reference_and_is_lost_after_is_found():
    before = TestsSnapshot.of([Ran(nodeid="t.py::a", outcome="passed"),
                               Ran(nodeid="t.py::b", outcome="passed"),
                               Ran(nodeid="t.py::c", outcome="failed"),
                               Ran(nodeid="t.py::d", outcome="passed")])
    after = TestsSnapshot.of([Ran(nodeid="t.py::a", outcome="passed"),
                              Ran(nodeid="t.py::b", outcome="skipped")])
    assert [(f.rule, f.test) for f in lost_tests(before, after)] == [("GRD007", "b"), ("GRD007", "d")]
    assert before.line() == "4 collected, 3 passed, 1 failed"
