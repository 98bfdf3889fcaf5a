"""Honest verdicts: `migrated` needs the target run's work on tpx and the migrated code still running on
CPU with the reference's results (the CPU guard). Real migrations through the CLI, real sandboxed runs.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.migration.device_work import DEVICE_SHARE_MIN
from agent.migration.facade import load
from agent.migration.nodes.report import final_status
from agent.migration.records import CpuCheck, DeviceWork, Edit, MigrationRecord, Plan, ReviewItem, RunRecord, ScanDigest
from agent.migration.state import MigrationOptions, dump
from tools.parity.models import ParityReport

ROOT = Path(__file__).resolve().parents[2]
_progs_spec = importlib.util.spec_from_file_location("agent_test_programs", Path(__file__).with_name("programs.py"))
programs = importlib.util.module_from_spec(_progs_spec)
_progs_spec.loader.exec_module(programs)

# Written as real code selects its device: CUDA only when asked for on the command line.
CUDA_FLAG_PROGRAM = '''import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--cuda", action="store_true", help="use CUDA")
args = parser.parse_args()
device = torch.device("cuda" if args.cuda else "cpu")


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 8, device=device)
    y = torch.randn(32, 4, device=device)
    for step in range(4):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
'''


def _ferry(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def _migrate(repo: Path, tmp_path: Path, *extra: str, run: str = "python prog.py") -> subprocess.CompletedProcess:
    return _ferry("migrate", str(repo), "--run", run, "--json", "--state-dir", str(tmp_path / "state"),
                  "--out", str(tmp_path / "out"), *extra)


def _result(tmp_path: Path) -> MigrationRecord:
    return MigrationRecord.model_validate_json((tmp_path / "out" / "result.json").read_text())


def _repo(tmp_path: Path, program: str) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text(program)
    return repo


# --- the rules, on the state the graph leaves (pure) -----------------------------------------------

def _state(work: DeviceWork | None, check: CpuCheck | None, test: str | None = "python -m pytest -q",
           **extra) -> dict:
    opts = MigrationOptions(source="/repo", run_command="python x.py", test_command=test, state_dir="/state")
    parity = ParityReport(verdict="pass", summary="parity pass", ref_dir="/r", target_dir="/t", counts={"pass": 3},
                          modules=[], tensors=[], scalars=[])
    return {"migration_id": "m", "options": dump(opts), "parity": dump(parity),
            "device_work": dump(work) if work else None, "cpu_check": dump(check) if check else None, **extra}


ON_TPX = DeviceWork(tpx_ops=90, total_ops=100, tpx_share=0.9, scope="through_window", run_tpx_ops=400)
CPU_OK = CpuCheck(verdict="pass", passed=True, reason="runs on CPU; 3 compared tensors match the reference run",
                  run_status="ok", against="reference")


def _tests_run(**counts: int) -> dict:
    return dump(RunRecord(kind="tests", command=["python", "-m", "pytest"], status="ok", exit_code=0,
                          isolation="bwrap", tests=counts))


def test_work_on_tpx_and_a_passing_cpu_guard_is_migrated():
    status, summary = final_status(_state(ON_TPX, CPU_OK))
    assert status == "migrated" and "90 of 100 ops on tpx (90%)" in summary
    assert "tests pass (not counted: the test command wrote no pytest report), parity passes" in summary


def test_the_summary_says_how_many_tests_ran_and_passed():
    earlier, last = _tests_run(passed=1, failed=1), _tests_run(passed=11, skipped=1)
    status, summary = final_status(_state(ON_TPX, CPU_OK, runs=[earlier, last]))
    assert status == "migrated" and "tests pass (12 tests ran: 11 passed, 1 skipped), parity passes" in summary
    assert final_status(_state(ON_TPX, CPU_OK, runs=[_tests_run(passed=1)]))[1].count("(1 test ran: 1 passed)") == 1


def test_without_a_test_command_the_summary_says_no_tests_ran():
    status, summary = final_status(_state(ON_TPX, CPU_OK, test=None))
    assert status == "migrated" and "tests pass" not in summary
    assert "no test command was given (no tests ran), parity passes" in summary
    status, summary = final_status(_state(ON_TPX, None, test=None))
    assert status == "partial" and "tests pass" not in summary and "no test command was given" in summary


@pytest.mark.parametrize("work, why", [
    (DeviceWork(tpx_ops=0, total_ops=120, tpx_share=0.0), "executed 0 of 120 ops on tpx"),
    (DeviceWork(tpx_ops=30, total_ops=100, tpx_share=0.3), "executed 30 of 100 ops on tpx (30%, below 50%)"),
    (DeviceWork(run_tpx_ops=12), "were not counted"),
    (None, "no evidence that the target run executed its work on tpx"),
])
def test_no_device_work_is_partial(work, why):
    status, summary = final_status(_state(work, CPU_OK))
    assert status == "partial" and why in summary
    if work is not None and work.tpx_share is not None:
        assert "the work stayed on CPU" in summary and "--cuda" in summary
    assert DEVICE_SHARE_MIN == 0.5


def test_the_models_compute_decides_when_the_run_has_any():
    """Host-side work (data, checkpoint I/O) outnumbers a small model's ops: its compute ops on tpx decide."""
    host_heavy = DeviceWork(tpx_ops=255, total_ops=750, tpx_share=0.34, compute_tpx_ops=40, compute_ops=40,
                            compute_share=1.0)
    status, summary = final_status(_state(host_heavy, CPU_OK))
    assert status == "migrated" and "40 of 40 compute ops (100%)" in summary, summary
    model_on_cpu = DeviceWork(tpx_ops=300, total_ops=400, tpx_share=0.75, compute_tpx_ops=2, compute_ops=40,
                              compute_share=0.05)
    status, summary = final_status(_state(model_on_cpu, CPU_OK))
    assert status == "partial" and "2 of its 40 compute ops" in summary and "model's work stayed on CPU" in summary


def test_a_failed_or_missing_cpu_guard_is_partial():
    broken = CpuCheck(verdict="fail", passed=False, run_status="failed",
                      reason="the migrated code no longer runs on CPU (the original does): AttributeError: x")
    status, summary = final_status(_state(ON_TPX, broken))
    assert status == "partial" and "the migrated code no longer runs on CPU (the original does): Attrib" in summary
    status, summary = final_status(_state(ON_TPX, None))
    assert status == "partial" and "CPU check did not run" in summary
    # both reasons are named when both rules fail
    status, summary = final_status(_state(DeviceWork(tpx_ops=0, total_ops=5, tpx_share=0.0), broken))
    assert status == "partial" and "stayed on CPU" in summary and "no longer runs on CPU" in summary


def test_an_original_without_a_cpu_path_does_not_hold_the_migration_back():
    none = CpuCheck(verdict="not_applicable", passed=None, run_status="failed",
                    reason="the original does not run on CPU either (failed (exit 1): needs a CUDA GPU)")
    status, summary = final_status(_state(ON_TPX, none))
    assert status == "migrated" and "the original needs an accelerator (no CPU path to keep)" in summary


def test_a_status_decided_by_the_graph_is_kept():
    assert final_status(_state(None, None, status="needs_human", summary="s")) == ("needs_human", "s")


# The same program selecting CUDA by an environment switch, off unless set: no rule turns it on.
ENV_SWITCH_PROGRAM = CUDA_FLAG_PROGRAM.replace(
    'parser = argparse.ArgumentParser()\nparser.add_argument("--cuda", action="store_true", help="use CUDA")\n'
    'args = parser.parse_args()\ndevice = torch.device("cuda" if args.cuda else "cpu")',
    'import os\n\ndevice = torch.device("cuda" if os.environ.get("USE_GPU") == "1" else "cpu")')
assert ENV_SWITCH_PROGRAM != CUDA_FLAG_PROGRAM


# --- real migrations -------------------------------------------------------------------------------

def test_work_left_on_cpu_by_a_device_switch_ends_partial(tmp_path):
    proc = _migrate(_repo(tmp_path, ENV_SWITCH_PROGRAM), tmp_path)
    result = _result(tmp_path)
    assert result.status == "partial", (result.summary, proc.stderr[-3000:])
    assert result.parity.passed is True  # the numbers match: on CPU, both of them
    work = result.device_work
    assert work is not None and work.tpx_ops == 0 and work.total_ops > 50 and work.tpx_share == 0.0, work
    assert f"the target run executed 0 of {work.total_ops} ops on tpx" in (result.summary or "")
    assert "the work stayed on CPU" in (result.summary or "")
    raw = json.loads((tmp_path / "out" / "result.json").read_text())
    assert raw["device_work"]["tpx_ops"] == 0 and raw["device_work"]["total_ops"] == work.total_ops
    report = (tmp_path / "out" / "report.md").read_text()
    assert f"aten ops on tpx: 0 of {work.total_ops} (0.0%)" in report


@pytest.mark.parametrize("run", ["python prog.py --cuda", "python prog.py"], ids=["asked", "flag_default"])
def test_a_cuda_flag_program_is_migrated_with_its_tpx_share(tmp_path, run):
    """With ``--cuda`` on its command line the program does its work on tpx; without it too, since
    FRY054 makes the flag default to the available accelerator (it ended partial before: work on CPU)."""
    proc = _migrate(_repo(tmp_path, CUDA_FLAG_PROGRAM), tmp_path, run=run)
    result = _result(tmp_path)
    assert result.status == "migrated", (result.summary, proc.stderr[-3000:])
    work = result.device_work
    assert work is not None and work.tpx_share is not None and work.tpx_share >= DEVICE_SHARE_MIN, work
    assert work.tpx_ops > 0 and work.run_tpx_ops > 0
    assert result.cpu_check is not None and result.cpu_check.passed and result.cpu_check.compared > 0
    assert result.cpu_check.against == "reference"
    assert [r.kind for r in result.run_log].count("cpu_check") == 1
    cpu_run = next(r for r in result.run_log if r.kind == "cpu_check")
    assert cpu_run.status == "ok"
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Device work (target run)" in report and "## CPU check" in report and "**parity: pass, " in report


# A CUDA program with a CPU path (it picks CUDA when there is one), whose float64 metric needs the
# offline policy (a fix that --approve asks about).
DEVICE_SWITCH_PROGRAM = '''import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def main():
    x = torch.arange(6, dtype=torch.float32).to(device)
    w = torch.ones(6, device=device)
    for step in range(3):
        total = ((x + step) * w).double().sum()
        print(f"step {step} loss {total.item():.6f}")


if __name__ == "__main__":
    main()
'''


def test_an_original_that_needs_an_accelerator_has_no_cpu_path_to_keep(tmp_path):
    """POLICY_PROGRAM calls .cuda() unconditionally: on CPU the original fails too, so the guard does
    not apply and the migration (which runs on CPU, or not, as the original does) is migrated."""
    proc = _migrate(_repo(tmp_path, programs.POLICY_PROGRAM), tmp_path)
    result = _result(tmp_path)
    assert result.status == "migrated", (result.summary, proc.stderr[-3000:])
    check = result.cpu_check
    assert check is not None and check.verdict in ("pass", "not_applicable"), check
    if check.verdict == "not_applicable":
        assert "the original does not run on CPU either" in check.reason
        assert [r.kind for r in result.run_log].count("cpu_original") == 1


# The migrated code as a person might answer the approval with: it picks "the" accelerator and
# assumes there is one (fine on tpx, an AttributeError on CPU), or it changes the CPU path's numbers.
ACCELERATOR_ONLY = ("import torch\n",
                    "import torch\n\nACC = torch.device(torch.accelerator.current_accelerator().type)\n")
CPU_NUMBERS = (".double().sum()", ".float().sum() * (1.01 if x.device.type == 'cpu' else 1.0)")


@pytest.mark.parametrize("edit, why, run_status", [
    (ACCELERATOR_ONLY, "the migrated code no longer runs on CPU (the original does)", "failed"),
    (CPU_NUMBERS, "the migrated code runs on CPU but changes its numbers", "ok"),
])
def test_a_patch_that_breaks_the_cpu_path_ends_partial(tmp_path, edit, why, run_status):
    sdir = tmp_path / "state"
    res = _migrate(_repo(tmp_path, DEVICE_SWITCH_PROGRAM), tmp_path, "--approve", "--id", "cpu-guard")
    assert res.returncode == 1 and json.loads(res.stdout)["status"] == "awaiting_approval", res.stderr[-3000:]
    files = load("cpu-guard", sdir).files
    old, new = edit
    assert old in files["prog.py"]
    mine = tmp_path / "mine.py"
    mine.write_text(files["prog.py"].replace(old, new, 1).replace(".double().sum()", ".float().sum()"))
    res2 = _ferry("resume", "cpu-guard", "--edit", f"prog.py={mine}", "--state-dir", str(sdir), "--json")
    result = _result(tmp_path)
    assert result.status == "partial", (result.summary, res2.stderr[-3000:])
    assert result.parity.passed is True  # on tpx the edited code is right
    assert result.device_work is not None and result.device_work.tpx_share is not None
    assert result.device_work.tpx_share >= DEVICE_SHARE_MIN
    assert result.cpu_check is not None and result.cpu_check.verdict == "fail" and not result.cpu_check.passed
    assert why in result.cpu_check.reason and why in (result.summary or "")
    assert result.cpu_check.run_status == run_status
    cpu_runs = [r for r in result.run_log if r.kind == "cpu_check"]
    assert len(cpu_runs) == 1 and cpu_runs[0].status == run_status
    # the original was run on CPU too, and it runs: the CPU path was the migration's to keep
    assert [r.status for r in result.run_log if r.kind == "cpu_original"] == ["ok"]


def _planned(entry: str, findings: list[str], edited: list[str]) -> dict:
    plan = Plan(rewrite_files=edited, auto_fix=len(edited), review=[], entry_file=entry, codemod_device="tpx",
                checks=[], max_iterations=3)
    scan = ScanDigest(findings=[ReviewItem(rule="FRY001", file=f, line=1, category="auto", message="cuda")
                                for f in findings])
    edits = [Edit(step="rewrite", kind="codemod", rule="FRY001", files=[f], diff="", reason="r") for f in edited]
    return {"plan": dump(plan), "scan": dump(scan), "edits": [dump(e) for e in edits]}


def test_a_program_without_cuda_is_named_as_such_when_its_work_stays_on_cpu():
    """A CPU-only program in a repository that holds CUDA elsewhere: the reason says there was nothing to move in
    it, not that a --cuda flag was off."""
    on_cpu = DeviceWork(tpx_ops=0, total_ops=146, tpx_share=0.0)
    status, summary = final_status(_state(on_cpu, CPU_OK, **_planned("regression/main.py", ["dcgan/main.py"],
                                                                      ["dcgan/main.py"])))
    assert status == "partial"
    assert "the file this command runs (regression/main.py) holds no CUDA code and Ferry left it unchanged" in summary
    # the entry holds CUDA (found by the scan, or edited): the device-selection hint stays
    for findings, edited in ((["regression/main.py"], []), ([], ["regression/main.py"])):
        status, summary = final_status(_state(on_cpu, CPU_OK, **_planned("regression/main.py", findings, edited)))
        assert status == "partial" and "check how the program selects its device (a --cuda flag" in summary
        assert "holds no CUDA" not in summary
