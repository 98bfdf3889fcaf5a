"""What the migrated input pipeline and its timing must do on the accelerator."""

import math
import os
import subprocess
import sys
import time

import torch

from dataset import FREQUENCIES, SignalDataset
from model import SignalNet
from pipeline import CudaTimer, make_loader, to_device

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def accelerator() -> torch.device:
    return torch.accelerator.current_accelerator() or torch.device("cpu")


def test_trains_on_the_accelerator():
    import train

    model, stats = train.train(epochs=2)
    assert all(p.device.type == accelerator().type for p in model.parameters())
    assert len(stats) == 2 and stats[1]["loss"] < stats[0]["loss"]
    for s in stats:
        assert s["samples"] == 384
        assert 0 < s["compute_ms"] <= s["epoch_ms"] and math.isfinite(s["epoch_ms"])


def test_batches_reach_the_accelerator_unchanged():
    x, y = next(iter(make_loader(SignalDataset(n=64), 16, shuffle=False)))
    dx, dy = to_device(x, y)
    assert dx.device.type == accelerator().type and dy.device.type == accelerator().type
    assert torch.equal(dx.cpu(), x) and torch.equal(dy.cpu(), y)
    assert dy.dtype == torch.int64 and dx.shape == (16, 1, 64)


def test_timer_times_accelerator_work_in_milliseconds():
    a = torch.randn(128, 128, device=accelerator())
    with CudaTimer() as t:
        time.sleep(0.05)
        b = (a @ a).relu().sum()
    assert b.device.type == accelerator().type
    assert 40 <= t.elapsed_ms < 10_000, t.elapsed_ms  # the block took >= 50 ms of wall time
    with CudaTimer() as quick:
        pass
    assert 0 <= quick.elapsed_ms < t.elapsed_ms


def test_accuracy_matches_a_cpu_evaluation():
    import train

    model, _ = train.train(epochs=1)
    loader = make_loader(SignalDataset(n=96, seed=1), 32, shuffle=False)
    on_device = train.evaluate(model, loader)
    cpu = SignalNet()
    cpu.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    with torch.no_grad():
        correct = sum((cpu(x).argmax(dim=1) == y).sum().item() for x, y in loader)
    assert abs(on_device - correct / 96) <= 2 / 96, (on_device, correct / 96)


def test_script_runs():
    proc = subprocess.run(
        [sys.executable, "train.py", "--epochs", "1"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "epoch 0 loss" in proc.stdout and "samples/s" in proc.stdout
    assert "validation accuracy" in proc.stdout


def test_dataset_is_deterministic_and_balanced():
    ds = SignalDataset(n=30)
    assert torch.equal(ds[7][0], SignalDataset(n=30)[7][0])
    labels = [ds[i][1] for i in range(len(ds))]
    assert [labels.count(c) for c in range(len(FREQUENCIES))] == [10, 10, 10]
    assert ds[0][0].shape == (1, 64) and ds[0][0].dtype == torch.float32


def test_loader_batches_cover_the_dataset_once():
    ds = SignalDataset(n=96)
    seen = torch.cat([y for _, y in make_loader(ds, 32, seed=3)])
    assert len(seen) == 96 and seen.bincount().tolist() == [32, 32, 32]
