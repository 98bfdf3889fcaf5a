"""Issue 29: the test command's run on the original (the test guard's reference) no longer waits until the
migrated code's tests are over: it needs only the original code, so the tests node starts it before it waits
for (or makes) the tests run, and ``start_beside`` starts it on a core left free. The guard's verdict is the
same: it compares the same two runs.

Where the full run is needed whatever the migrated code's tests do (here: coverage is measured); where a
passing tests run needs only the original's collection, tests/agent/test_reference_tests_needed.py.

In process, with the runs stubbed: nothing here runs a program.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from langgraph.runtime import Runtime

from agent.migration import adapters
from agent.migration.graph import MigrationContext
from agent.migration.nodes import guard, target
from agent.migration.nodes.target import start_beside
from agent.migration.options import MigrationOptions
from agent.migration.runs import RunScheduler
from agent.migration.state import dump
from tools.runner.models import RunResult

FILES = {"train.py": "import torch\ntorch.set_float32_matmul_precision('highest')\n"}


def _state(tmp_path: Path) -> dict[str, Any]:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    (repo / "train.py").write_text("import torch\n")
    opts = MigrationOptions(source=str(repo), run_command="python train.py", test_command="python -m pytest -q",
                            state_dir=str(tmp_path / "state"), coverage=True)
    return {"migration_id": "m1", "options": dump(opts), "files": FILES, "iteration": 1, "runs": [], "edits": [],
            "steps": []}


def _ok(tests: dict[str, int]) -> RunResult:
    return RunResult(command=["/bin/sh", "-c", "python -m pytest -q"], exit_code=0, status="ok", duration_s=1.0,
                     stdout_tail="", stderr_tail="", isolation="none", tests=tests)


def test_the_tests_on_the_original_run_beside_the_migrated_codes_tests(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    original_started = threading.Event()
    seen: dict[str, bool] = {}

    def run(path: Path, command: str, *, device: str, **kw: Any) -> RunResult:
        if device == "cpu":  # the reference tests: the original, CUDA redirected to CPU
            original_started.set()
            return _ok({"passed": 3})
        # the migrated code's tests, made now (none was started beside a target run): is the original's
        # run going at the same time? (bounded wait: on the code before, it starts only after this returns)
        seen["beside"] = original_started.wait(timeout=5)
        return _ok({"passed": 3})

    monkeypatch.setattr(adapters, "run", run)
    monkeypatch.setenv("FERRY_PARALLEL_RUNS", "2")  # two cores: the tests made now and the original's beside
    runs = RunScheduler()
    try:
        update = target.tests(_state(tmp_path), Runtime(context=MigrationContext(runs=runs)))
    finally:
        runs.close()
    assert seen == {"beside": True}
    assert [r["kind"] for r in update["runs"]] == ["reference_tests", "tests"]  # both recorded, as before
    assert update["reference_tests"] is not None and "status" not in update


class _Cores:
    """A run scheduler with ``cores`` slots that records what is started (it runs nothing)."""

    def __init__(self, cores: int) -> None:
        self.cores = cores
        self.started: list[str] = []

    def has(self, key: str) -> bool:
        return key in self.started

    def spare_cores(self) -> int:
        return self.cores - len(self.started)

    def start(self, key: str, fn: object) -> bool:
        self.started.append(key)
        return True


def test_a_core_left_free_beside_a_round_takes_the_tests_on_the_original(tmp_path: Path) -> None:
    state = _state(tmp_path)
    free = _Cores(3)
    assert start_beside(state, free, tmp_path, foreground=False) == [  # type: ignore[arg-type]
        "tests", "the CPU check", "the tests on the original"]
    assert free.started[-1] == guard.reference_tests_key(state) == "m1:reference-tests"
    # the tests and the CPU check of the round come first: with no core left, the original's tests wait
    busy = _Cores(2)
    assert start_beside(state, busy, tmp_path, foreground=False) == ["tests", "the CPU check"]  # type: ignore[arg-type]
    # once their result is in the state they are never run again
    done = _Cores(3)
    snap = {"outcomes": {}, "run_status": "ok"}
    assert start_beside({**state, "reference_tests": snap}, done, tmp_path,  # type: ignore[arg-type]
                        foreground=False) == ["tests", "the CPU check"]


class _Busy(_Cores):
    """Both cores taken by background runs of the round (its tests, started beside the trial, and its CPU
    check); joining gives the tests' result."""

    def __init__(self, state: dict[str, Any]) -> None:
        super().__init__(0)
        self.tests_key = f"m1:{target._tests_label(state)}"

    def has(self, key: str) -> bool:
        return key == self.tests_key or key in self.started

    def join(self, key: str, artifacts: Path) -> RunResult | None:
        return _ok({"passed": 3}) if key == self.tests_key else None

    def wait_for_core(self, key: str) -> None:
        """The tests are the first of the two to end: no core frees while they run."""
        assert key == self.tests_key

    def ended(self) -> int:
        return 0

    def wait_for_an_end(self, seen: int, until: object) -> int | None:
        return None  # (as above: none of the two ends while the node waits for the tests)

    def wake(self) -> None:
        pass


def test_no_core_free_the_tests_on_the_original_wait_for_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs in flight stay what the memory budget counts (sandbox.hostmem): with both cores taken, the
    original's tests are not added beside them; the node makes them once it has the tests' result."""
    made: list[str] = []

    def run(path: Path, command: str, *, device: str, **kw: Any) -> RunResult:
        made.append(device)
        return _ok({"passed": 3})

    monkeypatch.setattr(adapters, "run", run)
    state = _state(tmp_path)
    busy = _Busy(state)
    update = target.tests(state, Runtime(context=MigrationContext(runs=busy)))  # type: ignore[arg-type]
    assert busy.started == [] and made == ["cpu"]  # made by the node itself, after the join
    assert [r["kind"] for r in update["runs"]] == ["reference_tests", "tests"]
