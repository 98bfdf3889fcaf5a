"""What the migrated classifier training must do on the accelerator (device-generic)."""

import os
import subprocess
import sys

import torch
import torch.nn.functional as F

from model import Classifier, make_data

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def accelerator() -> torch.device:
    return torch.accelerator.current_accelerator() or torch.device("cpu")


def cpu_reference_losses(steps: int, batch: int = 64) -> list[float]:
    """The training loop on the CPU, written here (the norms' own epsilon throughout)."""
    torch.manual_seed(0)
    x, y = make_data()
    model = Classifier()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    losses = []
    for step in range(steps):
        start = (step * batch) % x.shape[0]
        loss = F.cross_entropy(model(x[start:start + batch]), y[start:start + batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_trains_on_the_accelerator():
    import train

    model, losses = train.train(steps=8)
    assert all(p.device.type == accelerator().type for p in model.parameters())
    assert losses[-1] < losses[0]


def test_losses_after_warm_up_match_a_cpu_run():
    """The fused path must compute the same normalisation: every step's loss as on the CPU (fp32 tiers)."""
    import train

    _, losses = train.train(steps=5)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_reference_losses(5)), rtol=1e-4, atol=1e-5)


def test_script_runs():
    proc = subprocess.run([sys.executable, "train.py", "--steps", "4"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "step 3 loss" in proc.stdout


def test_data_is_deterministic():
    (x1, y1), (x2, y2) = make_data(n=16), make_data(n=16)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
