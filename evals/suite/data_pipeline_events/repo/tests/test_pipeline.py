import time

import torch

from dataset import SignalDataset
from model import SignalNet
from pipeline import CudaTimer, make_loader, to_device
from train import train


def test_batches_arrive_on_the_gpu():
    x, y = next(iter(make_loader(SignalDataset(n=64), 16)))
    gx, gy = to_device(x, y)
    assert gx.is_cuda and gy.is_cuda
    assert torch.equal(gx.cpu(), x) and torch.equal(gy.cpu(), y)


def test_forward_on_gpu():
    x, _ = next(iter(make_loader(SignalDataset(n=64), 16)))
    assert SignalNet().cuda()(x.cuda()).shape == (16, 3)


def test_timer_measures_gpu_time():
    a = torch.randn(256, 256, device="cuda")
    with CudaTimer() as t:
        time.sleep(0.02)
        (a @ a).sum()
    assert t.elapsed_ms >= 15


def test_training_lowers_the_loss():
    _, stats = train(epochs=2)
    assert stats[1]["loss"] < stats[0]["loss"]
    assert all(s["compute_ms"] > 0 and s["compute_ms"] <= s["epoch_ms"] for s in stats)
