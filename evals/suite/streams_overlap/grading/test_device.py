"""What the migrated stream-overlapped pipeline and two-stream model must do on the accelerator."""

import os
import subprocess
import sys

import torch
import torch.nn.functional as F

from data import make_images, make_loader
from model import TwoTowerNet

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEAN = torch.tensor((120.0, 121.0, 119.0)).view(1, 3, 1, 1)
STD = torch.tensor((70.0, 71.0, 69.0)).view(1, 3, 1, 1)


def accelerator() -> torch.device:
    return torch.accelerator.current_accelerator() or torch.device("cpu")


def cpu_forward(model: TwoTowerNet, x: torch.Tensor) -> torch.Tensor:
    """The model's computation without streams, on the CPU."""
    return model.head(torch.cat([model.tower_a(x), model.tower_b(x)], dim=1))


def test_trains_on_the_accelerator():
    import train

    model, history = train.train(epochs=2)
    assert all(p.device.type == accelerator().type for p in model.parameters())
    assert history[1][0] < history[0][0] and history[1][1] > 0.6


def test_prefetcher_yields_every_batch_normalised_on_the_accelerator():
    from prefetch import CUDAPrefetcher

    images, labels = make_images(100)
    prefetcher = CUDAPrefetcher(make_loader(n=100, batch=32, shuffle=False))
    xs, ys = [], []
    x, y = prefetcher.next()
    while x is not None:
        assert x.device.type == accelerator().type and y.device.type == accelerator().type
        xs.append(x.cpu())
        ys.append(y.cpu())
        x, y = prefetcher.next()
    assert [len(b) for b in ys] == [32, 32, 32, 4]
    assert torch.equal(torch.cat(ys), labels)
    torch.testing.assert_close(torch.cat(xs), (images.float() - MEAN) / STD)


def test_two_stream_forward_matches_a_cpu_forward():
    torch.manual_seed(1)
    model = TwoTowerNet()
    x = (make_images(16)[0].float() - MEAN) / STD
    with torch.no_grad():
        expected = cpu_forward(model, x)
    model.to(accelerator())
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # full fp32 on the accelerator for the comparison
    try:
        with torch.no_grad():
            out = model(x.to(accelerator()))
    finally:
        torch.set_float32_matmul_precision(precision)
    assert out.device.type == accelerator().type
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-5)


def test_gradients_reach_both_towers_on_the_accelerator():
    torch.manual_seed(2)
    model = TwoTowerNet().to(accelerator())
    x = torch.randn(8, 3, 8, 8, device=accelerator())
    F.cross_entropy(model(x), torch.arange(8, device=accelerator()) % 3).backward()
    for tower in (model.tower_a, model.tower_b):
        grad = tower[0].weight.grad
        assert grad is not None and grad.device.type == accelerator().type
        assert grad.abs().sum().item() > 0


def test_script_runs():
    proc = subprocess.run(
        [sys.executable, "train.py", "--epochs", "1"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "epoch 0 loss" in proc.stdout and "accuracy" in proc.stdout


def test_images_are_deterministic_and_separable():
    (a, ya), (b, yb) = make_images(60), make_images(60)
    assert torch.equal(a, b) and torch.equal(ya, yb) and a.dtype == torch.uint8
    top = a[ya == 0][:, :, :4].float().mean() - a[ya == 0][:, :, 4:].float().mean()
    assert top > 50  # class 0 is bright in its top half
