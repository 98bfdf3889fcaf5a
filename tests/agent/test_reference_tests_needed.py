"""Issue 29: the tests on the original run in full only where their outcomes can change what the test guard
finds. When every test of the migrated code passed and no coverage is measured, a test can only be lost by
no longer being collected: the original's tests are only collected (``--collect-only``) and compared by node
id; the full run follows when one is missing, when a test failed, errored or was skipped, when coverage is
wanted, and for a command that is not pytest.

In process, with the runs stubbed (``adapters.run``): each stub writes what the runner would (the junit XML
of a tests run, the collect-only run's list); nothing here runs a program.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langgraph.runtime import Runtime

from agent.migration import adapters
from agent.migration.graph import MigrationContext
from agent.migration.nodes import guard, target
from agent.migration.options import MigrationOptions
from agent.migration.render import guard_section, result_of
from agent.migration.runs import RunScheduler
from agent.migration.state import dump
from tools.runner.api import COLLECT_FILE, COLLECTED_DIR
from tools.runner.models import RunResult

FILES = {"train.py": "import torch\n"}
BOTH = {"tests/test_m.py::test_a": "passed", "tests/test_m.py::test_p[cpu]": "passed",
        "tests/test_m.py::test_p[cuda]": "passed"}


def _state(tmp_path: Path, test_command: str = "python -m pytest -q", **opts: Any) -> dict[str, Any]:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    (repo / "train.py").write_text("import torch\n")
    options = MigrationOptions(source=str(repo), run_command="python train.py", test_command=test_command,
                               state_dir=str(tmp_path / "state"), **opts)
    return {"migration_id": "m1", "options": dump(options), "files": FILES, "iteration": 1, "runs": [], "edits": [],
            "steps": [], "status": None}


def _junit(path: Path, outcomes: dict[str, str]) -> Path:
    cases = []
    for nodeid, outcome in outcomes.items():
        file, _, name = nodeid.partition("::")
        classname = file.removesuffix(".py").replace("/", ".")
        child = {"passed": "", "failed": "<failure message='boom'/>", "skipped": "<skipped message='no'/>",
                 "error": "<error message='err'/>"}[outcome]
        cases.append(f"<testcase classname='{classname}' name='{name}' time='0.1'>{child}</testcase>")
    path.write_text(f"<testsuites><testsuite name='pytest'>{''.join(cases)}</testsuite></testsuites>")
    return path


class _Runs:
    """``adapters.run``'s stand-in: the migrated code's tests end as ``after``; on the original, the full run
    ends as ``before`` and the collect-only run lists ``before``'s ids. Records each run made."""

    def __init__(self, after: dict[str, str], before: dict[str, str], ok: bool | None = None) -> None:
        self.after, self.before = after, before
        self.ok = all(o in ("passed", "skipped") for o in after.values()) if ok is None else ok
        self.made: list[str] = []

    def __call__(self, path: Path, command: str, *, device: str, artifacts_dir: Path, collect_only: bool = False,
                 coverage: bool = False, **kw: Any) -> RunResult:
        artifacts_dir.mkdir(parents=True, exist_ok=True)
        if device == "cpu" and collect_only:
            self.made.append("collect")
            if command.startswith("python -m pytest"):
                (artifacts_dir / COLLECTED_DIR).mkdir(exist_ok=True)
                (artifacts_dir / COLLECTED_DIR / COLLECT_FILE).write_text(json.dumps({"tests": list(self.before)}))
            return self._result(command, True, None)
        if device == "cpu":
            self.made.append("full" + (" with coverage" if coverage else ""))
            return self._result(command, all(o != "failed" for o in self.before.values()),
                                _junit(artifacts_dir / "junit.xml", self.before))
        self.made.append("tests")
        return self._result(command, self.ok, _junit(artifacts_dir / "junit.xml", self.after))

    @staticmethod
    def _result(command: str, ok: bool, junit: Path | None) -> RunResult:
        return RunResult(command=["/bin/sh", "-c", command], exit_code=0 if ok else 1,
                         status="ok" if ok else "failed", duration_s=1.0, stdout_tail="", stderr_tail="",
                         isolation="none", junit_xml=junit)


def _tests(state: dict[str, Any], stub: _Runs, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setattr(adapters, "run", stub)
    monkeypatch.setenv("FERRY_PARALLEL_RUNS", "2")
    runs = RunScheduler()
    try:
        return dict(target.tests(state, Runtime(context=MigrationContext(runs=runs))))  # type: ignore[arg-type]
    finally:
        runs.close()


def test_every_test_passing_the_original_is_only_collected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    stub = _Runs(after=BOTH, before=BOTH)
    state = _state(tmp_path)
    update = _tests(state, stub, monkeypatch)
    assert sorted(stub.made) == ["collect", "tests"]  # no full run of the tests on the original
    assert [r["kind"] for r in update["runs"]] == ["reference_collect", "tests"]
    assert update.get("reference_tests") is None and "status" not in update
    assert update["reference_collected"]["tests"] == list(BOTH)
    done = {**state, **update, "status": "migrated"}
    # the report says which was done
    assert ("- tests before (the original, CUDA on CPU): collected 3, not run (every test passes on the migrated "
            "code and none is lost)") in guard_section(done)
    record = result_of(done, [])
    assert record.guard.tests_before is None and record.guard.tests_before_collected is not None
    assert record.guard.tests_before_collected.collected == 3
    # a later round whose tests all pass again: compared with the same list, nothing run on the original
    again = _Runs(after=BOTH, before=BOTH)
    later = _tests({**done, "iteration": 2, "files": {"train.py": "import torch  # 2\n"}}, again, monkeypatch)
    assert again.made == ["tests"] and [r["kind"] for r in later["runs"]] == ["tests"]


def test_a_parametrize_list_that_shrinks_is_still_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``@pytest.mark.parametrize('dev', ['cpu'] + (['cuda'] if torch.cuda.is_available() else []))``: on the
    original (CUDA redirected) both are collected, after the migration one; every test that runs passes."""
    shrunk = {k: v for k, v in BOTH.items() if "cuda" not in k}
    stub = _Runs(after=shrunk, before=BOTH)
    update = _tests(_state(tmp_path), stub, monkeypatch)
    assert sorted(stub.made) == ["collect", "full", "tests"]
    assert stub.made[-1] == "full"  # the full run follows the comparison that found the test missing
    assert [r["kind"] for r in update["runs"]] == ["reference_collect", "reference_tests", "tests"]
    assert update["status"] == "guard_refused"
    assert "GRD007" in update["summary"] and "tests/test_m.py::test_p[cuda]" in update["summary"]


def test_a_failing_test_runs_the_original_in_full_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    after = {**BOTH, "tests/test_m.py::test_a": "failed"}
    stub = _Runs(after=after, before=BOTH)
    update = _tests(_state(tmp_path), stub, monkeypatch)
    assert "full" in stub.made
    assert update["reference_tests"]["outcomes"] == BOTH and "reference_collected" not in update
    assert update["runs"][-2:][0]["kind"] == "reference_tests" and update["runs"][-1]["kind"] == "tests"
    assert "status" not in update  # a failing run goes back to the fix loop; the guard judges a passing one


def test_a_skipped_test_runs_the_original_in_full_and_the_guard_finds_it(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    after = {**BOTH, "tests/test_m.py::test_p[cuda]": "skipped"}
    stub = _Runs(after=after, before=BOTH)
    update = _tests(_state(tmp_path), stub, monkeypatch)
    assert "full" in stub.made and update["reference_tests"] is not None
    assert update["status"] == "guard_refused" and "GRD007" in update["summary"]
    assert "tests/test_m.py::test_p[cuda] passed on the reference and ends skipped" in update["summary"]


@pytest.mark.parametrize(("command", "opts"), [("python -m pytest -q", {"coverage": True}),
                                               ("python run_tests.py", {})])
def test_coverage_or_another_runner_runs_the_original_in_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              command: str, opts: dict[str, Any]):
    stub = _Runs(after=BOTH, before=BOTH)
    state = _state(tmp_path, test_command=command, **opts)
    assert guard.full_run_needed(state)  # type: ignore[arg-type]
    update = _tests(state, stub, monkeypatch)
    assert "collect" not in stub.made and any(m.startswith("full") for m in stub.made)
    assert ("full with coverage" in stub.made) == bool(opts)
    assert update["reference_tests"] is not None and "reference_collected" not in update


def test_a_collect_only_run_that_lists_nothing_falls_back_to_the_full_run(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    """``pytest`` named in the command, but the list is not written (a wrapper script that calls pytest in a
    way the plugin never sees, a collection error): the tests on the original run in full."""
    stub = _Runs(after=BOTH, before=BOTH)
    update = _tests(_state(tmp_path, test_command="pytest -q && python -m pytest -q"), stub, monkeypatch)
    assert sorted(stub.made) == ["collect", "full", "tests"]
    assert update["reference_tests"] is not None


def test_which_commands_can_only_collect():
    assert guard.runs_pytest("python -m pytest -q tests")
    assert guard.runs_pytest("cd sub && pytest -x")
    assert guard.runs_pytest("/usr/bin/py.test")
    assert not guard.runs_pytest("python -m unittest discover")
    assert not guard.runs_pytest("python run_tests.py")
    assert not guard.runs_pytest("echo 'unbalanced")


def test_the_early_start_beside_a_round_is_the_collection_unless_the_full_run_is_needed(tmp_path: Path):
    class Cores:
        def __init__(self) -> None:
            self.started: list[str] = []

        def has(self, key: str) -> bool:
            return key in self.started

        def spare_cores(self) -> int:
            return 3 - len(self.started)

        def start(self, key: str, fn: object) -> bool:
            self.started.append(key)
            return True

    free = Cores()
    assert target.start_beside(_state(tmp_path), free, tmp_path, foreground=False)[-1] == (  # type: ignore[arg-type]
        "the collection of the tests on the original")
    assert free.started[-1] == "m1:reference-collect"
    cov = Cores()
    assert target.start_beside(_state(tmp_path, coverage=True), cov, tmp_path,  # type: ignore[arg-type]
                               foreground=False)[-1] == "the tests on the original"
    assert cov.started[-1] == "m1:reference-tests"


PROG = '''import torch

device = torch.device("cuda")

if __name__ == "__main__":
    print(f"sum {torch.ones(3, device=device).sum().item():.4f}")
'''
# the parametrize list is built from what the run has; FERRY_DEVICE plays a check like torch.cuda.is_available()
# that is true on the original (CUDA redirected) and false after the migration
TESTS = '''import os

import pytest
import torch

from prog import device

DEVICES = {devices}


def test_ones():
    assert torch.ones(2, device=device).sum().item() == 2.0


@pytest.mark.parametrize("dev", DEVICES)
def test_on(dev):
    assert torch.zeros(1).item() == 0.0
'''


@pytest.mark.slow
@pytest.mark.parametrize(("devices", "lost"), [('["cpu", "meta"]', False),
                                               ('["cpu"] + (["gpu"] if os.environ["FERRY_DEVICE"] == "cpu" else [])',
                                                True)])
def test_a_real_migration_collects_the_original_and_runs_it_only_for_a_lost_test(tmp_path: Path, devices: str,
                                                                                 lost: bool):
    import subprocess
    import sys

    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "prog.py").write_text(PROG)
    (repo / "tests" / "test_prog.py").write_text(TESTS.format(devices=devices))
    (repo / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    res = subprocess.run([sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", "python prog.py", "--test",
                          "python -m pytest -q tests", "--json", "--state-dir", str(tmp_path / "state"), "--out",
                          str(tmp_path / "out"), "--id", "rt"], capture_output=True, text=True, timeout=600,
                         cwd=Path(__file__).resolve().parents[2])
    result = json.loads(res.stdout)
    kinds = [r["kind"] for r in result["run_log"]]
    report = (tmp_path / "out" / "report.md").read_text()
    if not lost:
        assert kinds.count("reference_collect") == 1 and "reference_tests" not in kinds, kinds
        assert result["guard"]["tests_before"] is None
        assert result["guard"]["tests_before_collected"]["tests"] == [
            "tests/test_prog.py::test_ones", "tests/test_prog.py::test_on[cpu]", "tests/test_prog.py::test_on[meta]"]
        assert "- tests before (the original, CUDA on CPU): collected 3, not run (every test passes" in report
        assert result["status"] != "guard_refused", result["summary"]
    else:  # the guard refuses as it did with the full run first
        assert kinds.count("reference_collect") == 1 and kinds.count("reference_tests") == 1, kinds
        assert result["status"] == "guard_refused" and res.returncode == 4
        assert ("GRD007 test_lost at tests/test_prog.py: tests/test_prog.py::test_on[gpu] passed on the reference "
                "and is no longer collected after the migration") in result["summary"]
        assert "- tests before (the original, CUDA on CPU): 3 collected, 3 passed" in report
