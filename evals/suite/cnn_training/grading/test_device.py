"""What the migrated CNN training and its memory bookkeeping must do on the accelerator."""

import os
import subprocess
import sys

import torch

from net import SmallCNN, synthetic_images

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def accelerator() -> torch.device:
    return torch.accelerator.current_accelerator() or torch.device("cpu")


def test_trains_on_the_accelerator():
    import train

    model, losses, peak = train.train(steps=8)
    dev = accelerator()
    assert all(p.device.type == dev.type for p in model.parameters())
    assert all(b.device.type == dev.type for b in model.buffers())  # BatchNorm statistics too
    assert losses[-1] < losses[0]
    # the activations of a training step live in device memory, and the tracker saw them
    assert peak > 32 * 8 * 16 * 16 * 4


def test_peak_memory_counts_accelerator_allocations():
    from gpu_utils import PeakMemory

    with PeakMemory() as mem:
        x = torch.empty(512, 1024, device=accelerator())
        del x
    assert mem.peak >= 512 * 1024 * 4
    assert mem.reserved >= 0


def test_describe_gpu_reports_the_accelerator():
    from gpu_utils import describe_gpu

    info = describe_gpu()
    assert info["count"] == torch.accelerator.device_count() >= 1
    assert info["index"] == 0
    assert isinstance(info["name"], str) and info["name"]
    assert info["total_memory"] > 0
    assert 0 <= info["free"] <= info["total"]


def test_accuracy_on_the_accelerator_agrees_with_the_cpu():
    import train

    model, _, _ = train.train(steps=6)
    images, labels = synthetic_images(n=128, seed=1)
    on_device = train.accuracy(model, images, labels)
    cpu_model = SmallCNN()
    cpu_model.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    cpu_model.eval()
    with torch.no_grad():
        cpu_pred = cpu_model(images).argmax(1)
    on_cpu = (cpu_pred == labels).float().mean().item()
    assert abs(on_device - on_cpu) <= 1 / 128  # at most one near-tie decided differently


def test_script_runs():
    proc = subprocess.run(
        [sys.executable, "train.py", "--steps", "3"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "step 2 loss" in proc.stdout
    assert "held-out accuracy" in proc.stdout


def test_synthetic_images_are_deterministic():
    a, la = synthetic_images(n=16)
    b, lb = synthetic_images(n=16)
    assert torch.equal(a, b) and torch.equal(la, lb)
    assert a.shape == (16, 1, 16, 16) and int(la.max()) < 4
