"""Hidden grading tests: device-generic (the accelerator when one is loaded, else the CPU)."""

import math

import pytest
import torch

from data import make_images
from train import train

DEVICE = torch.accelerator.current_accelerator() or torch.device("cpu")

# train(steps=10, deterministic=True) of the original program, CUDA redirected to the CPU (fp32)
REFERENCE_LOSSES = [1.0256507, 1.3197185, 1.0066618, 1.1381916, 1.0560257, 1.1497256, 1.0321711, 1.1846876,
                    1.052386, 1.2819227]


def test_training_runs_on_the_accelerator():
    model, losses, acc = train(steps=60)
    assert next(model.parameters()).device.type == DEVICE.type
    assert all(math.isfinite(v) for v in losses)
    assert sum(losses[-5:]) < 0.5 * sum(losses[:5])
    assert acc > 0.8


def test_accelerator_run_follows_the_cpu_reference():
    # the program asks for TF32-class matmuls; on any device that is ~1e-3 relative per op
    model, losses, _ = train(steps=10, deterministic=True)
    assert next(model.parameters()).device.type == DEVICE.type
    assert losses[0] == pytest.approx(REFERENCE_LOSSES[0], rel=1e-2)
    assert losses == pytest.approx(REFERENCE_LOSSES, rel=5e-2)


def test_deterministic_runs_are_bitwise_equal_on_the_accelerator():
    model, a, acc_a = train(steps=10, deterministic=True)
    assert next(model.parameters()).device.type == DEVICE.type
    _, b, acc_b = train(steps=10, deterministic=True)
    assert a == b and acc_a == acc_b


def test_images_are_deterministic():
    (xa, ya), (xb, yb) = make_images(40, seed=2), make_images(40, seed=2)
    assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert set(ya.tolist()) == {0, 1, 2}
