"""``ferry check`` end to end: sandboxed reference (cpu) and target (tpx) runs of unmigrated CUDA code."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from agent.cli import main

TRAIN = '''\
import torch, torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.LayerNorm(64), nn.Linear(64, 4)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(3):
    x = torch.randn(16, 32).cuda()
    y = torch.randint(0, 4, (16,)).cuda()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward(); opt.step(); opt.zero_grad()
    print(f"step {step} | loss: {loss.item():.5f}")
'''


def _digest(repo: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(repo.rglob("*")) if p.is_file())).hexdigest()


@pytest.fixture
def cuda_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(TRAIN)
    return repo


@pytest.mark.slow
def test_check_finds_bf16_drift_then_passes_with_highest(cuda_repo: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    before = _digest(cuda_repo)
    out = tmp_path / "out"
    rc = main(["check", str(cuda_repo), "--run", "python train.py", "--out", str(out), "--json",
               "--target-set", "TPX_MATMUL_PRECISION=bf16"])
    result = json.loads(capsys.readouterr().out)
    assert rc == 1 and result["status"] == "fail", result["summary"]
    assert result["reference"]["status"] == "ok" and result["target"]["status"] == "ok"
    div = result["parity"]["first_divergence"]
    assert div["module"] == "Sequential.0" and div["likely_cause"] == "matmul_precision"
    assert div["output"]["tolerances"]["rtol"] == 1.3e-6
    assert (out / "parity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## First divergence" in (out / "report.md").read_text()
    prof = result["profile"]
    assert any(f["kind"] == "host_sync" and f["line"] == 10 for f in prof["findings"])  # loss.item()
    assert _digest(cuda_repo) == before  # the user's repo is never written

    rc = main(["check", str(cuda_repo), "--run", "python train.py", "--out", str(tmp_path / "out2"),
               "--no-profile", "--target-set", "TPX_MATMUL_PRECISION=highest"])
    text = capsys.readouterr().out
    assert rc == 0 and "ferry check: PASS" in text and "parity PASS" in text, text


def test_check_rejects_bad_input(cuda_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["check", str(tmp_path / "nope"), "--run", "python train.py"]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert main(["check", str(cuda_repo), "--run", "python train.py", "--set", "PATH=/x"]) == 2
    assert "only FERRY_* and TPX_*" in capsys.readouterr().err
    assert main(["check", str(cuda_repo), "--run", "  "]) == 2
    assert main(["check", str(cuda_repo), "--run", "python train.py", "--steps", "0"]) == 2


def test_runs_that_never_started_are_named_in_the_note(cuda_repo: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that never started (a sandbox error) has no probe dump: the note says which run and
    why, instead of the TypeError of a missing path (\"... not 'NoneType'\")."""
    from tools.parity.check import check
    from tools.parity.models import CheckRequest

    monkeypatch.setenv("FERRY_SANDBOX_ISOLATION", "no-such-level")  # every run is a sandbox error
    result = check(CheckRequest(path=cuda_repo, command="python train.py", out_dir=tmp_path / "out", profile=False))
    assert result.status == "run_failed" and result.parity is None
    assert result.reference.status == result.target.status == "sandbox_error"
    assert [n for n in result.notes if n.startswith("no parity report")] == [
        "no parity report: the reference run left no probe dump (status sandbox_error); "
        "the target run left no probe dump (status sandbox_error)"]
