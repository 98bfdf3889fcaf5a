"""Issue 29: the matmul-precision cause trial runs the code with FIX008 written in, and when the policy then
applies that edit, the trial's run is the next round's target run (``agent.migration.nodes.target.reusable``):
the same code is not run twice. A prepared run is taken only for exactly the code it ran (digest of the edited
files) with its probe dump still there; the next round's tests and CPU check carry the code's digest in
their names, so a run started for code the round does not end up with is never joined as that round's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.migration.nodes.target import reusable, start_beside
from agent.migration.options import MigrationOptions
from agent.migration.records import PreparedRun
from agent.migration.state import dump
from agent.migration.workspace import code_digest, round_label
from tools.runner.models import RunResult

ROOT = Path(__file__).resolve().parents[2]
FIXED = {"train.py": "import torch\ntorch.set_float32_matmul_precision('highest')\n"}


def _run(tmp_path: Path, ok: bool = True, probe: bool = True) -> RunResult:
    pdir = tmp_path / "probe"
    if probe:
        pdir.mkdir(exist_ok=True)
    return RunResult(command=["python", "train.py"], exit_code=0 if ok else 1, status="ok" if ok else "failed",
                     duration_s=4.0, stdout_tail="", stderr_tail="", isolation="rlimits", probe_dir=pdir)


def _state(tmp_path: Path, files: dict[str, str], prepared: PreparedRun | None) -> dict:
    opts = MigrationOptions(source=str(tmp_path), run_command="python train.py", state_dir=str(tmp_path / "s"))
    return {"migration_id": "m1", "options": dump(opts), "files": files, "iteration": 1,
            "prepared_target": dump(prepared) if prepared is not None else None}


def test_a_prepared_run_is_the_target_run_only_of_the_code_it_ran(tmp_path: Path):
    prepared = PreparedRun(files_digest=code_digest(FIXED), workspace=str(tmp_path / "ws"), run=_run(tmp_path))
    taken = reusable(_state(tmp_path, FIXED, prepared))
    assert taken is not None and taken.probe_dir == tmp_path / "probe"
    # the policy (or a reviewer) applied another edit: the code differs by one character, so it runs again
    other = {"train.py": FIXED["train.py"].replace("highest", "high")}
    assert reusable(_state(tmp_path, other, prepared)) is None
    assert reusable(_state(tmp_path, {}, prepared)) is None
    assert reusable(_state(tmp_path, FIXED, None)) is None


def test_a_prepared_run_that_failed_or_lost_its_probe_dump_is_not_taken(tmp_path: Path):
    failed = PreparedRun(files_digest=code_digest(FIXED), workspace="ws", run=_run(tmp_path, ok=False))
    assert reusable(_state(tmp_path, FIXED, failed)) is None
    shutil.rmtree(tmp_path / "probe")
    gone = PreparedRun(files_digest=code_digest(FIXED), workspace="ws", run=_run(tmp_path, probe=False))
    assert reusable(_state(tmp_path, FIXED, gone)) is None


def test_a_rounds_runs_are_named_for_its_code_not_only_its_number():
    assert round_label("tests", 1, FIXED) == round_label("tests", 1, dict(FIXED))
    assert round_label("tests", 1, FIXED) != round_label("tests", 1, {"train.py": "import torch\n"})
    assert round_label("cpu-check", 1, FIXED) != round_label("cpu-check", 2, FIXED)
    # path and text are told apart (no concatenation makes two mappings one)
    assert code_digest({"a": "bc"}) != code_digest({"ab": "c"})


class _Slots:
    """A run scheduler with two cores that records what is started (it runs nothing); ``tests_in_flight``: this
    round's tests are running already (started beside the trial)."""

    def __init__(self, tests_in_flight: bool) -> None:
        self.tests_in_flight = tests_in_flight
        self.started: list[str] = []

    def has(self, key: str) -> bool:
        return key in self.started or (self.tests_in_flight and ":tests-" in key)

    def spare_cores(self) -> int:
        return 2 - int(self.tests_in_flight) - len(self.started)

    def start(self, key: str, fn: object) -> bool:
        self.started.append(key)
        return True


def test_a_round_that_takes_a_prepared_run_starts_its_cpu_check_on_the_core_its_own_run_would_take(tmp_path):
    """Two cores, the round's tests in flight (started beside the trial): a round making its own target run
    has no core left for the CPU check, a round taking the trial's run does (it makes no run itself)."""
    opts = MigrationOptions(source=str(tmp_path), run_command="python train.py", test_command="pytest -q",
                            state_dir=str(tmp_path / "s"))
    state = {"migration_id": "m1", "options": dump(opts), "files": FIXED, "iteration": 1}
    own = _Slots(tests_in_flight=True)
    assert start_beside(state, own, tmp_path, foreground=True) == [] and own.started == []
    taken = _Slots(tests_in_flight=True)
    assert start_beside(state, taken, tmp_path, foreground=False) == ["the CPU check"]
    assert [k.split(":")[1].rsplit("-", 1)[0] for k in taken.started] == ["cpu-check-1"]


@pytest.mark.slow
def test_after_a_measured_fix008_the_target_runs_once_not_twice(tmp_path: Path):
    """mlp_training fails parity on its first run (tpx multiplies float32 in bf16), the precision trial with
    FIX008 written in removes the divergence, and the policy adds FIX008: the migration ends as before
    (``migrated``, FIX008 in the patch) with no full target run made: the first round's is an evidence run, the
    second round's is taken from the trial."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "evals" / "suite" / "mlp_training" / "repo", repo,
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", "python train.py --steps 8",
                        "--json", "--offline", "--state-dir", str(tmp_path / "s"), "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.joinpath("result.json").is_file(), (r.stdout + r.stderr)[-4000:]
    result = json.loads(out.joinpath("result.json").read_text())
    assert result["status"] == "migrated", result["summary"]
    assert [e["rule"] for e in result["edits"] if e["kind"] == "policy"] == ["matmul_precision_highest"]
    targets = [run for run in result["run_log"] if run["kind"] == "target"]
    made = [run for run in targets if not run["reused"]]
    # the first round is an evidence run (ended after its recorded steps, agent.migration.nodes.evidence), the
    # second round's target run is the trial's: no full run of the target made
    evidence = [run for run in result["run_log"] if run["kind"] == "evidence"]
    assert len(targets) == 1 and not made, targets
    assert [(run["status"], run["ended_after_steps"]) for run in evidence] == [("ended", 2)]
    trials = [run for run in result["run_log"] if run["kind"] == "cause_trial"]
    assert len(trials) == 1 and targets[-1]["reused"] and targets[-1]["duration_s"] == trials[0]["duration_s"]
    assert result["runs"] == sum(1 for run in result["run_log"] if not run["reused"])
    first_parity = next(step["summary"] for step in result["steps"] if step["node"] == "parity")
    assert "(FIX008 written into train.py)" in first_parity and "disappears" in first_parity, first_parity
    assert 'torch.set_float32_matmul_precision("highest")' in out.joinpath("ferry.patch").read_text()
