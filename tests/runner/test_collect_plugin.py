"""Issue 29: a run that only collects its tests (``RunRequest(collect_only=True)``: ``--collect-only`` and the
``_ferry_collect`` plugin) writes the node ids of the tests pytest would run, named as the junit report of a
full run names them, so that the guard compares them with a full run's outcomes as they are. Sandboxed runs of
a small project: a class, a parametrized test, both junit families."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.guard.outcomes import read_collected
from tools.runner.api import run
from tools.runner.models import RunRequest

TESTS = ("import pytest\n\n\n"
         "def test_plain():\n    assert 1\n\n\n"
         "@pytest.mark.parametrize('n', [1, 2, 'a b'])\ndef test_param(n):\n    assert n\n\n\n"
         "class TestGroup:\n    def test_in_class(self):\n        assert 1\n")


@pytest.mark.parametrize("family", ["xunit2", "xunit1"])
def test_the_collected_ids_are_the_junit_reports_names(tmp_path: Path, family: str):
    src = tmp_path / "proj"
    (src / "tests").mkdir(parents=True)
    (src / "tests" / "test_m.py").write_text(TESTS)
    (src / "pytest.ini").write_text(f"[pytest]\njunit_family = {family}\n")
    full = run(RunRequest(path=src, command="python -m pytest -q tests", device="cpu", artifacts_dir=tmp_path / "f",
                          timeout_s=120))
    assert full.status == "ok" and full.junit_xml is not None, full.stdout_tail + full.stderr_tail
    from tools.trace.pytest_out import read_junit_xml

    ran = sorted(t.nodeid for t in read_junit_xml(full.junit_xml))
    assert len(ran) == 5
    only = run(RunRequest(path=src, command="python -m pytest -q tests", device="cpu", artifacts_dir=tmp_path / "c",
                          timeout_s=120, collect_only=True))
    assert only.status == "ok", only.stdout_tail + only.stderr_tail
    assert sorted(read_collected(tmp_path / "c") or []) == ran
    assert "passed" not in only.stdout_tail  # collected, not run


def test_a_command_that_is_not_pytest_writes_no_list(tmp_path: Path):
    src = tmp_path / "proj"
    src.mkdir()
    (src / "check.py").write_text("print('checked')\n")
    res = run(RunRequest(path=src, command="python check.py", device="cpu", artifacts_dir=tmp_path / "c",
                         timeout_s=120, collect_only=True))
    assert res.status == "ok" and "checked" in res.stdout_tail
    assert read_collected(tmp_path / "c") is None  # the guard then runs the tests in full
