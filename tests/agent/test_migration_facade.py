"""The one door to migrations (agent.migration.facade): typed snapshots and progress updates, one early
start, one options builder for every caller, old checkpoints' flat model limits, cancel."""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

import agent.migration.early
import agent.migration.facade
import agent.migration.graph
import agent.service.workers
from agent.cli import main, migrate_cmd
from agent.migration.driver import drive, snapshot
from agent.migration.facade import (
    INTERRUPT,
    ApprovalRequest,
    MigrationOptions,
    MigrationSnapshot,
    NodeUpdate,
    RunScheduler,
    cancel,
    load,
    start,
)
from agent.migration.state import dump, options_of
from agent.service.schemas import SessionOptions, SessionSource
from agent.service.settings import ServiceSettings
from agent.service.store import SessionRow
from agent.service.workers import migration_options
from tools.runner.models import RunResult

ROOT = Path(__file__).resolve().parents[2]
QUESTION = {"type": "approve_edit", "rule": "float64_to_float32", "kind": "policy", "site": "prog.py:3",
            "reason": "float64 is not supported on tpx", "diff": "-a\n+b\n", "how": "resume with ..."}


@pytest.fixture
def no_code(tmp_path: Path) -> Path:
    """A repository without Python files: its migration ends at ingest (needs_human), in-process and fast."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README").write_text("no code here\n")
    return repo


@pytest.fixture
def order(monkeypatch) -> list[str]:
    """What a start did, in order: ``early`` (the reference run and warm interpreter, not run here), ``graph``."""
    calls: list[str] = []
    build = agent.migration.graph.build_graph
    monkeypatch.setattr(agent.migration.early, "start_early", lambda runs, opts, mid: calls.append("early"))
    monkeypatch.setattr(agent.migration.graph, "build_graph", lambda: calls.append("graph") or build())
    return calls


def test_start_and_load_answer_a_typed_snapshot(no_code: Path, tmp_path: Path, order: list[str]):
    sdir = tmp_path / "state"
    opts = MigrationOptions(source=str(no_code), run_command="python x.py", state_dir=str(sdir))
    seen: list[tuple[str, NodeUpdate]] = []
    ended = start(opts, migration_id="typed", progress=lambda node, update: seen.append((node, update)))
    loaded = load("typed", sdir)
    for snap in (ended, loaded):
        assert isinstance(snap, MigrationSnapshot)
        assert snap.migration_id == "typed" and snap.status == "needs_human" and snap.summary
        assert snap.pending == [] and snap.interrupts == [] and snap.finished and not snap.waiting
        assert [s.node for s in snap.steps][:1] == ["ingest"] and snap.steps[-1].node == "report"
        assert snap.options == opts and snap.iteration == 0 and snap.edits == [] and snap.files == {}
        assert snap.outputs is None or Path(snap.outputs.result).name == "result.json"
    # each node's update, typed too: the ingest step as a Step, its status once decided
    assert seen[0][0] == "ingest" and [s.node for s in seen[0][1].steps] == ["ingest"]
    assert seen[0][1].status == "needs_human"


def test_a_new_migration_starts_its_reference_run_once_before_the_graph_is_built(no_code, tmp_path, order,
                                                                                   capsys):
    assert main(["migrate", str(no_code), "--run", "python x.py", "--offline", "--json",
                 "--state-dir", str(tmp_path / "state")]) == 1  # needs_human
    assert order == ["early", "graph"]  # once (the CLI does not start it itself), before the graph
    order.clear()
    assert main(["migrate", str(no_code), "--run", "python x.py", "--offline", "--json",
                 "--state-dir", str(tmp_path / "state"), "--id", "given"]) == 1
    assert order == ["early", "graph"]
    order.clear()
    assert main(["migrate", str(no_code), "--run", "python x.py", "--offline", "--json",
                 "--state-dir", str(tmp_path / "state"), "--id", "given"]) == 2  # the id has state
    assert order == [] and "migration given already exists" in capsys.readouterr().err  # nothing started


class _App:
    """A compiled graph's stand-in: streams the chunks given, then holds a state waiting on QUESTION."""

    def __init__(self, chunks: list[dict[str, Any]]) -> None:
        self.chunks = chunks

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        return iter(self.chunks)

    def get_state(self, cfg: dict[str, Any]) -> Any:
        task = SimpleNamespace(name="apply_fix", interrupts=[SimpleNamespace(value=dict(QUESTION))])
        return SimpleNamespace(values={"migration_id": "m", "status": None, "iteration": 1},
                               next=("apply_fix",), tasks=(task,))


def test_progress_and_interrupts_come_typed():
    step = {"node": "diagnose", "summary": "run failed: float64", "seconds": 0.5}
    chunks = [{"diagnose": {"steps": [step], "iteration": 1}},
              {"__metadata__": {"cached": True}, "scan": {"steps": [{"node": "scan"}]}},  # replayed: not progress
              {INTERRUPT: [SimpleNamespace(value=dict(QUESTION))]}]
    seen: list[tuple[str, NodeUpdate]] = []
    snap = drive(_App(chunks), None, "m", agent.migration.graph.MigrationContext(runs=RunScheduler()),
                 lambda node, update: seen.append((node, update)))
    assert [node for node, _ in seen] == ["diagnose", INTERRUPT]
    assert seen[0][1].steps[0].summary == "run failed: float64" and seen[0][1].iteration == 1
    question = seen[1][1].interrupts[0]
    assert isinstance(question, ApprovalRequest) and question.rule == "float64_to_float32"
    assert question.data() == QUESTION  # what --json prints and the service's events digest: unchanged
    assert snap.waiting and snap.pending == ["apply_fix"] and snap.interrupts == [ApprovalRequest(**QUESTION)]
    assert snapshot(_App([]), "m").interrupts[0].site == "prog.py:3"


FLAT = {"llm_max_calls": 7, "llm_max_tokens": 900, "llm_max_wall_s": 60.0, "llm_timeout_s": 5.0,
        "llm_retries": 2, "llm_backoff_s": 0.5, "llm_max_reply_chars": 3000}


def test_a_checkpoint_with_the_old_flat_model_limits_still_loads():
    stored = {"source": "/r", "run_command": "python x.py", "state_dir": "/s", "llm": True, **FLAT}
    opts = options_of({"options": stored})
    limits = opts.llm_limits
    assert (limits.max_calls, limits.max_tokens, limits.max_wall_s, limits.request_timeout_s, limits.max_retries,
            limits.backoff_s, limits.max_reply_chars) == (7, 900, 60.0, 5.0, 2, 0.5, 3000)
    assert opts.llm and "llm_max_calls" not in dump(opts) and dump(opts)["llm_limits"]["max_calls"] == 7
    assert MigrationSnapshot({"options": stored}).options == opts
    assert MigrationOptions.model_validate(dump(opts)) == opts  # and the new form reads back as it was
    with pytest.raises(ValidationError):  # the old keys keep their bounds
        MigrationOptions.model_validate({**stored, "llm_max_calls": 0})


def test_the_cli_and_the_service_build_their_options_with_one_function(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("FERRY_LLM_MAX_CALLS", "11")
    built: list[MigrationOptions] = []
    real = agent.migration.facade.options_for
    for module in (agent.migration.facade, agent.service.workers):  # the CLI's door, the service's import
        monkeypatch.setattr(module, "options_for", lambda **kw: built.append(real(**kw)) or built[-1])
    repo = tmp_path / "repo"
    repo.mkdir()
    parser = argparse.ArgumentParser()
    migrate_cmd.add_arguments(parser)
    cli = migrate_cmd.build_options(parser.parse_args(
        [str(repo), "--run", "python x.py", "--test", "pytest -q", "--offline", "--device", "tpx",
         "--skip-rule", "FRY013", "--seed", "3", "--state-dir", str(tmp_path / "state")]))
    row = SessionRow(id="s1", owner="me", state="queued", status=None, summary=None, step=None,
                     options=SessionOptions(run="python x.py", test="pytest -q", device="tpx", llm=False, seed=3,
                                            skip_rules=["FRY013"]),
                     source=SessionSource(kind="path", name=str(repo)), attempt=1, answer=None, cancel=False,
                     error=None, created_at=0.0, updated_at=0.0)
    service = migration_options(ServiceSettings(data_dir=tmp_path / "data"), row)
    assert built == [cli, service]  # both through options_for
    where = {"source", "out_dir", "state_dir"}  # what differs by design: the service's own copies
    assert cli.model_dump(exclude=where) == service.model_dump(exclude=where)
    assert cli.llm_limits.max_calls == 11 and cli.max_iterations == 8 and cli.run_timeout_s == 600.0


def test_cancel_stops_the_migration_and_its_background_runs_only(tmp_path: Path):
    runs = RunScheduler()
    ended: dict[str, threading.Event] = {}

    def waiting(key: str) -> Any:
        def fn(stop: threading.Event) -> RunResult:
            ended[key] = stop
            stop.wait(30)
            return RunResult(status="cancelled", exit_code=None, duration_s=0.0, command=["x"], stdout_tail="",
                             stderr_tail="", isolation="none")
        return fn

    for key in ("m1:reference", "m1:probe", "m2:reference"):
        assert runs.start(key, waiting(key))
    stop = threading.Event()
    try:
        assert sorted(cancel("m1", runs, stop)) == ["m1:probe", "m1:reference"]
        assert stop.is_set() and runs.running() == ["m2:reference"]
    finally:
        cancel("", runs)
        runs.close()
    assert runs.running() == []


def test_the_door_is_light_so_the_early_start_goes_on_while_langgraph_is_imported():
    code = ("import sys, agent.migration.facade; "
            "sys.exit(sorted(m for m in sys.modules if m.split('.')[0] == 'langgraph')[:3] or 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
