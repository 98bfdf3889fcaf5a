"""Issue 33's done-when for items 2, 3 and 8: ``ferry migrate`` with ``--python`` to a venv holding torch 2.13.0
and nothing else (no pydantic, no Ferry) migrates with parity compared (the probe on both sides), and
neither ``ferry migrate`` nor ``ferry eval`` takes anything from the caller's working directory, even one
holding ``backend/``, ``tools/`` and ``agent/`` packages (a second Ferry checkout, a user's repository)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FERRY = Path(sys.executable).parent / "ferry"  # the console script a user runs

TORCHRUN_TRAIN = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group(backend="nccl")
rank = dist.get_rank()
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).cuda(),
            device_ids=[local_rank])
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(rank)
for step in range(3):
    x = torch.randn(16, 8, generator=g).cuda()
    loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0:
        print(f"step {step} loss {loss.item():.5f}")
if rank == 0:
    torch.save(model.module.state_dict(), "snapshot.pt")
dist.barrier()
dist.destroy_process_group()
"""

COMPILED_TRAIN = """\
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1)).cuda()
model = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(1)
for step in range(3):
    x = torch.randn(16, 8, generator=g).cuda()
    loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.5f}")
"""


def caller_dir(base: Path) -> Path:
    """A working directory holding backend/, tools/ and agent/ packages that break whoever imports them."""
    for name in ("backend", "tools", "agent", "sandbox", "evals"):
        (base / name).mkdir(parents=True)
        (base / name / "__init__.py").write_text(
            f"raise ImportError('the caller\\'s {name}/ was imported instead of Ferry\\'s')\n")
    return base


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}


def migrate(repo: Path, run: str, tmp_path: Path, *, python: Path, cwd: Path) -> dict[str, object]:
    proc = subprocess.run(
        [str(FERRY), "migrate", str(repo), "--run", run, "--python", str(python), "--json", "--offline",
         "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "out")],
        cwd=cwd, capture_output=True, text=True, timeout=900, env=_env())
    assert proc.stdout.strip(), proc.stderr[-3000:]
    out: dict[str, object] = json.loads(proc.stdout)
    return out


def _parity_compared(out: dict[str, object]) -> None:
    assert out["status"] == "migrated", (out.get("summary"), out.get("run_log"))
    parity = out.get("parity")
    assert isinstance(parity, dict) and parity.get("passed") is True, parity
    assert "not a probe dump" not in json.dumps(out)


@pytest.mark.slow
def test_a_two_rank_torchrun_migration_in_a_torch_only_venv_from_a_cwd_with_ferrys_folder_names(
        tmp_path: Path, torch_only_python: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(TORCHRUN_TRAIN)
    out = migrate(repo, "torchrun --standalone --nproc_per_node=2 train.py", tmp_path, python=torch_only_python,
                  cwd=caller_dir(tmp_path / "caller"))
    _parity_compared(out)
    assert out["python"] == str(torch_only_python)


@pytest.mark.slow
def test_a_compiled_training_migration_in_a_torch_only_venv(tmp_path: Path, torch_only_python: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(COMPILED_TRAIN)
    out = migrate(repo, "python train.py", tmp_path, python=torch_only_python, cwd=tmp_path)
    _parity_compared(out)


@pytest.mark.slow
def test_ferry_eval_from_a_cwd_with_ferrys_folder_names(tmp_path: Path):
    """``ferry eval`` starts each case's migration as a Python subprocess in the caller's working directory:
    there, ``python -m agent.cli`` imported the caller's agent/ (issue 33 item 8; every case failed so, the
    distributed ones included: the smallest case shows it, the two-rank migration above covers torchrun)."""
    caller = caller_dir(tmp_path / "caller")
    out = tmp_path / "eval-out"
    proc = subprocess.run([str(FERRY), "eval", "synthetic", "--case", "mlp_training", "--out", str(out),
                           "--no-progress"], cwd=caller, capture_output=True, text=True, timeout=900, env=_env())
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()] \
        if (out / "results.jsonl").is_file() else []
    assert len(results) == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    case = results[0]
    assert case["status"] == case["expected_status"] == "migrated", (case, proc.stderr[-2000:])
    assert "was imported instead of Ferry" not in json.dumps(case)
    shutil.rmtree(out, ignore_errors=True)
