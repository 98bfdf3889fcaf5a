"""Issue 29: a CPU check started beside a target run that fails is followed, in the same background job, by the
original's run on CPU, which the cpu_check node makes whenever the check fails (it decides between "no CPU path
to keep" and a broken one): the node then finds it finished instead of making it after the tests. The verdict
is the same: the same two runs are judged.

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
from agent.migration.nodes import cpu_check
from agent.migration.nodes.common import artifacts_dir
from agent.migration.options import MigrationOptions
from agent.migration.runs import RunScheduler
from agent.migration.state import dump
from tools.runner.models import RunResult

FILES = {"train.py": "import torch\nassert torch.accelerator.is_available(), 'needs an accelerator'\n"}


def _state(tmp_path: Path) -> dict[str, Any]:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    (repo / "train.py").write_text("import torch\nassert torch.cuda.is_available(), 'needs a GPU'\n")
    opts = MigrationOptions(source=str(repo), run_command="python train.py", state_dir=str(tmp_path / "state"))
    return {"migration_id": "m1", "options": dump(opts), "files": FILES, "iteration": 1, "runs": [], "edits": [],
            "steps": []}


def _failed(adir: Path, why: str) -> RunResult:
    run = RunResult(command=["/bin/sh", "-c", "python train.py"], exit_code=1, status="failed", duration_s=0.2,
                    stdout_tail="", stderr_tail=f"AssertionError: {why}", isolation="none", device="cpu",
                    artifacts_dir=adir)
    adir.mkdir(parents=True, exist_ok=True)
    (adir / "result.json").write_text(run.model_dump_json())  # as the runner leaves a finished run
    return run


def test_the_originals_run_on_cpu_follows_a_failed_cpu_check_in_the_background(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    state = _state(tmp_path)
    made: list[tuple[str, str]] = []  # (which code, on which thread)

    def run(path: Path, command: str, *, device: str, **kw: Any) -> RunResult:
        which = "original" if Path(path) == Path(state["options"]["source"]) else "migrated"
        made.append((which, "background" if threading.current_thread().name.startswith("ferry-run") else "node"))
        return _failed(kw["artifacts_dir"], "needs a GPU" if which == "original" else "needs an accelerator")

    monkeypatch.setattr(adapters, "run", run)
    runs = RunScheduler()
    try:
        key, cdir = cpu_check.cpu_check_key(state), artifacts_dir(state, cpu_check.cpu_check_label(state))
        ws = tmp_path / "ws"
        assert runs.start(key, lambda cancel: cpu_check.run_cpu_check(state, ws, cdir, cancel))
        update = cpu_check.cpu_check(state, Runtime(context=MigrationContext(runs=runs)))
    finally:
        runs.close()
    assert made == [("migrated", "background"), ("original", "background")]  # the node made no run itself
    check = update["cpu_check"]
    assert check["verdict"] == "not_applicable" and "needs a GPU" in check["reason"]  # the verdict as before
    assert [r["kind"] for r in update["runs"]] == ["cpu_check", "cpu_original"]
    assert not any(r.get("reused") for r in update["runs"])


def test_a_cpu_check_that_passes_or_is_cancelled_runs_nothing_more(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    state = _state(tmp_path)
    made: list[Path] = []

    def cancelled(path: Path, command: str, *, device: str, **kw: Any) -> RunResult:
        made.append(Path(path))
        return RunResult(command=["python"], exit_code=None, status="cancelled", duration_s=0.1, stdout_tail="",
                         stderr_tail="", isolation="none")

    monkeypatch.setattr(adapters, "run", cancelled)
    event = threading.Event()
    event.set()
    cpu_check.run_cpu_check(state, tmp_path / "ws", tmp_path / "c", event)
    assert made == [tmp_path / "ws"]
