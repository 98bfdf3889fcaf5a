"""The collection of the tests on the original takes the core a background run frees while the migrated
code's tests still run, instead of waiting for their end (issue 29: it was the migration's last 0.6 s).

In process, with the runs stubbed (``adapters.run``) and gated by events: nothing here runs a program."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from langgraph.runtime import Runtime

from agent.migration import adapters
from agent.migration.graph import MigrationContext
from agent.migration.nodes import target
from agent.migration.runs import RunScheduler
from tests.agent.test_reference_tests_needed import BOTH, _junit, _Runs, _state
from tools.runner.models import RunResult

WAIT_S = 20.0


def _gated(gate: threading.Event, result: RunResult) -> Any:
    def run(cancel: threading.Event) -> RunResult:
        assert gate.wait(WAIT_S), "the test never opened this gate"
        return result
    return run


def test_the_original_is_collected_as_soon_as_a_core_frees_beside_the_tests(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FERRY_PARALLEL_RUNS", "2")
    state = _state(tmp_path)
    stub = _Runs(after=BOTH, before=BOTH)
    collected_while_testing = threading.Event()
    tests_done, cpu_check_done = threading.Event(), threading.Event()

    def run(path: Path, command: str, **kw: Any) -> RunResult:
        if kw.get("collect_only") and not tests_done.is_set():
            collected_while_testing.set()
        return stub(path, command, **kw)

    monkeypatch.setattr(adapters, "run", run)
    tests_dir = tmp_path / "tests-run"
    tests_dir.mkdir()
    passed = RunResult(command=["pytest"], exit_code=0, status="ok", duration_s=1.0, stdout_tail="", stderr_tail="",
                       isolation="none", junit_xml=_junit(tests_dir / "junit.xml", BOTH))
    runs = RunScheduler()
    try:
        # the round's tests and its CPU check, started beside the target run, hold both cores
        assert runs.start(target._tests_key(state), _gated(tests_done, passed))
        assert runs.start("m1:cpu-check-1", _gated(cpu_check_done, passed))
        out: dict[str, Any] = {}
        node = threading.Thread(target=lambda: out.update(target.tests(  # type: ignore[arg-type]
            state, Runtime(context=MigrationContext(runs=runs)))))
        node.start()
        assert not collected_while_testing.wait(0.5)  # no core yet: nothing started beside
        cpu_check_done.set()  # the CPU check ends: a core is free while the tests still run
        assert collected_while_testing.wait(WAIT_S), "the collection waited for the tests' end"
        tests_done.set()
        node.join(WAIT_S)
        assert not node.is_alive()
    finally:
        tests_done.set()
        cpu_check_done.set()
        runs.close()
    assert stub.made == ["collect"]  # only collected: every migrated test passed
    assert out["reference_collected"]["tests"] == list(BOTH)


def test_waiting_for_a_core_ends_with_the_run_waited_on_or_any_other(tmp_path: Path):
    runs = RunScheduler()
    mine, other = threading.Event(), threading.Event()
    ok = RunResult(command=["x"], exit_code=0, status="ok", duration_s=0.1, stdout_tail="", stderr_tail="",
                   isolation="none")
    try:
        runs.wait_for_core("absent")  # nothing under that key: at once
        assert runs.start("k:mine", _gated(mine, ok))
        runs.wait_for_core("k:mine")  # nothing else runs beside it: at once
        assert runs.start("k:other", _gated(other, ok))
        waiter = threading.Thread(target=runs.wait_for_core, args=("k:mine",))
        waiter.start()
        waiter.join(0.3)
        assert waiter.is_alive()  # both still run
        other.set()
        waiter.join(WAIT_S)
        assert not waiter.is_alive() and runs.running() == ["k:mine"]
    finally:
        mine.set()
        other.set()
        runs.close()
