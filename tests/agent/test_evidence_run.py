"""Issue 29: where the matmul-precision trial would apply, the first target run is an evidence run (the plain
code on tpx, ended by the probe after its recorded steps) with the FIX008 code's full run beside it
(agent/migration/nodes/evidence.py). The full plain run is made only where it can change the outcome, and a
stopped run is never the target run a verdict rests on."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agent.migration.facade import resume, start
from agent.migration.nodes import causes, evidence
from agent.migration.options import MigrationOptions
from agent.migration.state import dump, edits_of, runs_of, speculation_of, steps_of, target_ok_of
from sandbox import hostmem
from tests.agent.test_resume_pending_writes import crash_after_writes_of

ROOT = Path(__file__).resolve().parents[2]

# float32 values bf16 holds exactly (small integers, dyadic gradients): tpx's bf16 matmuls change nothing
EXACT = '''import torch

dev = torch.device("cuda")
net = torch.nn.Linear(4, 2).to(dev)
with torch.no_grad():
    net.weight.copy_(torch.tensor([[1.0, 2.0, 0.0, -1.0], [0.5, 0.0, 1.0, 1.0]]))
    net.bias.zero_()
opt = torch.optim.SGD(net.parameters(), lr=0.0)
x = torch.tensor([[1.0, 0.0, -1.0, 2.0], [2.0, 1.0, 0.0, 0.0]] * 4, device=dev)
y = torch.tensor([[1.0, 0.0]] * 8, device=dev)
for step in range(30):
    loss = ((net(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss={loss.item():.4f}")
'''


@pytest.fixture(autouse=True)
def _side_by_side(monkeypatch) -> None:
    """The FIX008 run goes beside the evidence run: side-by-side runs on, also on a one-core host."""
    if hostmem.parallel_runs() < 2:
        monkeypatch.setenv(hostmem.PARALLEL_ENV, "2")


def _opts(tmp_path: Path, case: str | None = None, program: str | None = None,
          command: str = "python train.py") -> MigrationOptions:
    repo = tmp_path / "repo"
    if case is not None:
        shutil.copytree(ROOT / "evals" / "suite" / case / "repo", repo, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        repo.mkdir()
        (repo / "train.py").write_text(program or EXACT)
    return MigrationOptions(source=str(repo), run_command=command, state_dir=str(tmp_path / "s"))


def _kinds(values: dict) -> list[tuple[str, str, bool]]:
    return [(r.kind, r.status, r.reused) for r in runs_of(values)]


@pytest.mark.slow
def test_a_float32_program_that_needs_fix008_makes_no_full_plain_run(tmp_path: Path) -> None:
    """mlp_training: the evidence run (2 recorded steps of 8) fails parity, the precision trial joins the FIX008
    run made beside it, the policy applies FIX008 and that run is the target run: the same verdict and the same
    measured trial as a migration that made the full plain run, without that run."""
    done = start(_opts(tmp_path, "mlp_training", command="python train.py --steps 8"), migration_id="ev-fix")
    values = done.values
    assert done.status == "migrated", done.summary
    assert [e.rule for e in edits_of(values) if e.kind == "policy"] == ["matmul_precision_highest"]
    runs = runs_of(values)
    made = [(r.kind, r.status) for r in runs if not r.reused]
    assert ("evidence", "ended") in made and ("cause_trial", "ok") in made
    assert not any(r.kind == "target" and not r.reused for r in runs), _kinds(values)  # no full plain run
    ev = next(r for r in runs if r.kind == "evidence")
    assert ev.ended_after_steps == 2
    target = target_ok_of(values)
    trial = next(r for r in runs if r.kind == "cause_trial")
    assert target is not None and target.status == "ok" and target.ended_after_steps is None
    assert [r for r in runs if r.kind == "target"][-1].duration_s == trial.duration_s
    first = next(s.summary for s in steps_of(values) if s.node == "parity")
    assert "evidence run's 2 recorded steps" in first
    assert "(FIX008 written into train.py)" in first and "disappears" in first, first


@pytest.mark.slow
def test_a_program_whose_evidence_passes_makes_the_full_plain_run_and_no_fix008(tmp_path: Path) -> None:
    done = start(_opts(tmp_path), migration_id="ev-pass")
    values = done.values
    assert done.status == "migrated", done.summary
    assert not [e for e in edits_of(values) if e.kind == "policy"]  # no FIX008
    made = [(r.kind, r.status) for r in runs_of(values) if not r.reused]
    assert made.count(("target", "ok")) == 1 and ("evidence", "ended") in made, made
    assert not any(kind == "cause_trial" for kind, _ in made)  # the FIX008 run was cancelled, never measured
    nodes = [s.node for s in steps_of(values)]
    assert nodes.count("target_run") == 2 and nodes.count("parity") == 2, nodes
    declined = next(s.summary for s in steps_of(values) if s.node == "parity")
    assert "evidence run passes parity on its 2 recorded steps" in declined
    spec = speculation_of(values)
    assert spec is not None and spec.phase == "done"
    target = target_ok_of(values)
    assert target is not None and target.ok and target.profile_dir is not None  # the full run's profile


@pytest.mark.parametrize(("command", "program"), [
    ("torchrun --standalone --nproc_per_node=2 train.py", EXACT),
    ("python train.py", EXACT.replace("import torch\n", "import torch\nimport torch.multiprocessing as mp\n")),
    ("python train.py", EXACT.replace("for step in", "with torch.autocast('cuda'):\n    pass\nfor step in")),
])
def test_a_multi_process_or_autocast_program_does_not_speculate(tmp_path: Path, command: str, program: str) -> None:
    opts = _opts(tmp_path, program=program, command=command)
    state = {"migration_id": "m", "options": dump(opts), "files": {}, "iteration": 0, "runs": []}
    assert evidence.one_plain_process(state) is not None
    assert not evidence.wanted(state)


def test_a_plain_float32_program_speculates_unless_switched_off(tmp_path: Path, monkeypatch) -> None:
    opts = _opts(tmp_path)
    state = {"migration_id": "m", "options": dump(opts), "files": {}, "iteration": 0, "runs": []}
    assert evidence.one_plain_process(state) is None
    assert evidence.wanted(state)
    fix = causes.precision_fix(state)  # what speculate writes beside the evidence run
    assert fix is not None and fix[0] == "train.py" and "highest" in fix[1]
    monkeypatch.setenv("FERRY_EVIDENCE_RUN", "0")
    assert not evidence.wanted(state)


def test_no_evidence_run_when_side_by_side_runs_are_off(tmp_path: Path, monkeypatch) -> None:
    """The FIX008 run goes beside the evidence run: with FERRY_PARALLEL_RUNS=1 ("1 runs everything in order",
    docs/agent.md) nothing may run beside the foreground run, so the first target run is the full plain run."""
    opts = _opts(tmp_path)
    state = {"migration_id": "m", "options": dump(opts), "files": {}, "iteration": 0, "runs": []}
    monkeypatch.setenv("FERRY_PARALLEL_RUNS", "2")
    assert evidence.wanted(state)
    monkeypatch.setenv("FERRY_PARALLEL_RUNS", "1")
    assert not evidence.wanted(state)


@pytest.mark.slow
def test_a_resumed_migration_does_not_take_the_evidence_run_as_the_target(tmp_path: Path) -> None:
    """Killed after the evidence run, with the FIX008 run's result lost: the resumed migration measures the
    trial with a FIX008 run of its own and never takes the stopped run as the target run."""
    opts = _opts(tmp_path, "mlp_training", command="python train.py --steps 8")
    first = start(opts, migration_id="ev-resume")
    assert first.status == "migrated", first.summary
    spec = speculation_of(first.values)
    assert spec is not None
    crash_after_writes_of(tmp_path / "s" / "checkpoints.sqlite", "ev-resume", "target_run")
    shutil.rmtree(spec.fix_dir)  # the FIX008 run's result is gone with the killed process
    done = resume("ev-resume", tmp_path / "s")
    values = done.values
    assert done.status == "migrated", done.summary
    runs = runs_of(values)
    assert [r.kind for r in runs if r.kind == "evidence"] == ["evidence"]  # replayed, not made again
    assert not any(r.kind == "target" and not r.reused for r in runs), _kinds(values)
    target = target_ok_of(values)
    assert target is not None and target.status == "ok" and target.ended_after_steps is None
    assert target.probe_dir != spec.run.probe_dir


def _spec_state(tmp_path: Path, phase: str, files: dict[str, str]) -> dict:
    from agent.migration.records import Speculation
    from agent.migration.workspace import code_digest
    from tools.runner.models import RunResult

    run = RunResult(command=["python", "train.py"], exit_code=86, status="ended", duration_s=1.0, stdout_tail="",
                    stderr_tail="", isolation="rlimits", probe_dir=tmp_path, ended_after_steps=2)
    spec = Speculation(files_digest=code_digest({}), run=run, phase=phase, fix_file="train.py", fix_text="x",
                       fix_digest="d", fix_workspace=str(tmp_path), fix_key="m:fix008-0", fix_dir=str(tmp_path))
    opts = MigrationOptions(source=str(tmp_path), run_command="python train.py", state_dir=str(tmp_path / "s"))
    return {"migration_id": "m", "options": dump(opts), "files": files, "iteration": 0, "speculation": dump(spec)}


def test_a_pending_evidence_goes_to_parity_a_declined_one_back_to_the_target_run(tmp_path: Path) -> None:
    from agent.migration import edges

    pending = _spec_state(tmp_path, "pending", {})
    assert edges.after_target(pending) == "parity"  # no target run: the evidence is what parity judges
    assert target_ok_of(pending) is None and evidence.pending(pending) is not None
    assert edges.after_parity(_spec_state(tmp_path, "declined", {})) == "target_run"
    assert edges.after_parity(_spec_state(tmp_path, "done", {})) == "cpu_check"
    other_code = _spec_state(tmp_path, "pending", {"train.py": "changed"})  # evidence of another round's code
    assert evidence.pending(other_code) is None and edges.after_target(other_code) == "diagnose"


@pytest.mark.slow
def test_the_evidence_run_starts_before_fix008_is_written(tmp_path: Path, monkeypatch) -> None:
    """FIX008 is written (libcst) while the evidence run goes, not before it starts."""
    import threading

    from agent.migration import adapters
    from agent.migration.nodes import causes

    evidence_started = threading.Event()
    run, fix = adapters.run, causes.precision_fix

    def watched_run(path: Path, command: str, **kw):
        if Path(kw["artifacts_dir"]).name.startswith("evidence-"):
            evidence_started.set()
        return run(path, command, **kw)

    seen: list[bool] = []

    def watched_fix(state):
        seen.append(evidence_started.wait(30))
        return fix(state)

    monkeypatch.setattr(adapters, "run", watched_run)
    monkeypatch.setattr(causes, "precision_fix", watched_fix)
    done = start(_opts(tmp_path), migration_id="ev-order")
    assert done.status == "migrated", done.summary
    assert seen and seen[0], "FIX008 was written before the evidence run started"


@pytest.mark.slow
def test_where_the_policy_would_not_write_fix008_the_evidence_run_is_cancelled(tmp_path: Path, monkeypatch) -> None:
    from agent.migration.nodes import causes

    monkeypatch.setattr(causes, "precision_fix", lambda state: None)
    done = start(_opts(tmp_path), migration_id="ev-nofix")
    values = done.values
    assert done.status == "migrated", done.summary
    made = [(r.kind, r.status) for r in runs_of(values) if not r.reused]
    assert ("target", "ok") in made and not any(kind in ("evidence", "cause_trial") for kind, _ in made), made
    assert speculation_of(values) is None
    assert target_ok_of(values) is not None


@pytest.mark.slow
def test_with_cores_to_spare_the_fix008_rounds_tests_start_beside_the_evidence_run(tmp_path: Path, monkeypatch) -> None:
    """The evidence run is itself a background run: the FIX008 round's tests need one more free run slot, not
    two (four slots: reference, evidence, FIX008, tests)."""
    monkeypatch.setenv(hostmem.PARALLEL_ENV, "4")
    _, first = _mlp_with_tests(tmp_path, "ev-beside")
    assert "the FIX008 code's full run, tests" in first, first


def _mlp_with_tests(tmp_path: Path, migration_id: str) -> tuple[dict, str]:
    """mlp_training migrated with its tests: the final values and the first target_run step's summary (the
    evidence run's)."""
    opts = _opts(tmp_path, "mlp_training", command="python train.py --steps 8").model_copy(
        update={"test_command": "python -m pytest -q tests"})
    done = start(opts, migration_id=migration_id)
    assert done.status == "migrated", done.summary
    first = next(s.summary for s in steps_of(done.values) if s.node == "target_run")
    assert first.startswith("evidence run"), first
    return done.values, first


@pytest.mark.slow
def test_the_fix008_rounds_tests_take_the_evidence_runs_core_as_it_ends(tmp_path: Path, monkeypatch) -> None:
    """Two run slots: the evidence and the FIX008 run fill them, so the FIX008 round's tests cannot start beside
    the evidence run; they start as soon as it ends (while parity judges it), not after parity, and that round's
    tests are the ones the migration then collects."""
    import time

    from agent.migration.nodes import target

    monkeypatch.setenv(hostmem.PARALLEL_ENV, "2")
    calls: list[tuple[bool, list[str]]] = []
    beside = target.start_beside

    def watched(state, runs, ws, foreground=True):
        ev_running = any(":evidence-" in k for k in runs.running())
        while not ev_running and any(k.endswith(":reference") for k in runs.running()):
            time.sleep(0.05)  # the evidence run ended first: the reference run's slot is to be free too
        started = beside(state, runs, ws, foreground)
        calls.append((ev_running, started))
        return started

    monkeypatch.setattr(target, "start_beside", watched)
    values, first = _mlp_with_tests(tmp_path, "ev-after")
    assert "started beside it; as it ended: tests" in first, first
    assert calls[0] == (True, []), calls  # beside the evidence run: no slot
    assert calls[1][0] is False and "tests" in calls[1][1], calls  # once it ended: the tests
    tests_step = next(s.summary for s in steps_of(values) if s.node == "tests")
    assert "beside the target run" in tests_step, tests_step  # collected, not made again
