"""A package the program needs and the runs' interpreter lacks is the environment's fault:
failed_environment naming the package, the interpreter and the install command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.migration.environment import missing_module, rendezvous_failure
from agent.policy.base import Diagnosis
from tools.runner.models import RunResult
from tools.trace.models import Signature, Trace

ROOT = Path(__file__).resolve().parents[2]


def _diag(exc_type: str, message: str) -> Diagnosis:
    return Diagnosis(phase="run", kind="missing_cuda_package", exc_type=exc_type, message=message)


@pytest.mark.parametrize(("message", "module", "package"), [
    ("No module named 'tiktoken'", "tiktoken", "tiktoken"),
    ("No module named 'cv2'", "cv2", "opencv-python"),
    ("No module named 'yaml.loader'", "yaml", "pyyaml"),
    ("No module named 'einops_exts'", "einops_exts", "einops-exts"),
])
def test_a_third_party_module_is_named_with_its_pip_package(message: str, module: str, package: str):
    found = missing_module(_diag("ModuleNotFoundError", message), ["train.py"], interpreter="/venv/bin/python")
    assert found is not None and (found.module, found.package) == (module, package)
    assert found.install_command() == f"/venv/bin/python -m pip install {package}"
    assert "/venv/bin/python" in found.message() and found.install_command() in found.message()


@pytest.mark.parametrize(("exc_type", "message", "known"), [
    ("ModuleNotFoundError", "No module named 'models'", ["train.py", "models/__init__.py"]),  # the repo's own
    ("ModuleNotFoundError", "No module named 'utils'", ["train.py", "utils.py"]),
    ("ModuleNotFoundError", "No module named 'apex'", ["train.py"]),  # CUDA-only: no pip install helps
    ("ImportError", "cannot import name 'foo' from 'bar'", ["train.py"]),
    ("RuntimeError", "No module named 'tiktoken'", ["train.py"]),
])
def test_not_the_environment(exc_type: str, message: str, known: list[str]):
    assert missing_module(_diag(exc_type, message), known) is None


@pytest.mark.slow
def test_a_migration_needing_a_missing_package_ends_failed_environment(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text("import torch\nimport ferry_absent_pkg\n\nx = torch.ones(3).cuda()\nprint(x)\n")
    res = subprocess.run([sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", "python train.py",
                          "--json", "--offline", "--state-dir", str(tmp_path / "s"), "--out", str(tmp_path / "o")],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    out = json.loads(res.stdout)
    assert out["status"] == "failed_environment", res.stderr[-2000:]
    assert "'ferry_absent_pkg'" in out["summary"] and "-m pip install ferry-absent-pkg" in out["summary"]
    assert sys.executable in out["summary"]
    assert "does not run with CUDA redirected" not in out["summary"]


def _run_with(trace: Trace | None) -> RunResult:
    return RunResult(command=["torchrun"], exit_code=1, status="failed", duration_s=1.0, stdout_tail="",
                     stderr_tail="", isolation="bwrap", device="cpu", seed=0, artifacts_dir=Path("/tmp"), trace=trace)


def test_a_rendezvous_failure_is_the_environment_with_its_cause():
    sig = Signature(kind="rendezvous", detail="could not reach its TCP store; cause: DistNetworkError: timed out")
    msg = rendezvous_failure(_run_with(Trace(exc_type="torch.distributed.elastic.rendezvous.api."
                                             "RendezvousConnectionError", message="The connection failed.",
                                             signature=sig)), "the reference run")
    assert msg is not None and msg.startswith("the reference run could not start its distributed job")
    assert "RendezvousConnectionError: The connection failed." in msg and "cause: DistNetworkError" in msg
    assert "not the code" in msg
    other = Trace(exc_type="ValueError", message="bad", signature=Signature(kind="other"))
    assert rendezvous_failure(_run_with(other), "x") is None
    assert rendezvous_failure(_run_with(None), "x") is None


@pytest.mark.slow
def test_a_migration_whose_rendezvous_fails_ends_failed_environment(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(
        "import datetime, torch, torch.distributed as dist\n"
        "dist.init_process_group('nccl', init_method='tcp://no-such-host.invalid:29511', rank=0, world_size=2,\n"
        "                        timeout=datetime.timedelta(seconds=2))\n"
        "print(torch.ones(3).cuda())\n")
    res = subprocess.run([sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", "python train.py",
                          "--json", "--offline", "--state-dir", str(tmp_path / "s"), "--out", str(tmp_path / "o")],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    out = json.loads(res.stdout)
    assert out["status"] == "failed_environment", res.stderr[-2000:]
    assert "could not start its distributed job" in out["summary"] and "cause:" in out["summary"]
    assert "does not run with CUDA redirected" not in out["summary"]
