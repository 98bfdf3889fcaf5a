"""Hidden grading tests: device-generic (the accelerator when one is loaded, else the CPU)."""

import math

import pytest
import torch
import torch.nn.functional as F

import fused_ops
from train import make_data, train

DEVICE = torch.accelerator.current_accelerator() or torch.device("cpu")

# train(steps=20) of the original program, CUDA redirected to the CPU (the reference path)
REFERENCE_LOSSES = [0.9301164, 0.7760194, 0.7300745, 0.6423974, 0.64744, 0.7072014, 0.7431022, 0.6432965,
                    0.6573268, 0.540227, 0.6118414, 0.5451621, 0.6003568, 0.6683115, 0.5436642, 0.6307029,
                    0.6031623, 0.4832886, 0.5717293, 0.5470948]


def test_model_trains_on_the_accelerator():
    model, losses = train(steps=30)
    assert next(model.parameters()).device.type == DEVICE.type
    assert all(math.isfinite(v) for v in losses)
    assert sum(losses[-5:]) < 0.8 * sum(losses[:5])


def test_bias_gelu_on_the_accelerator_is_gelu_tanh():
    g = torch.Generator().manual_seed(3)
    x, b = torch.randn(16, 64, generator=g), torch.randn(64, generator=g)
    got = fused_ops.bias_gelu(x.to(DEVICE), b.to(DEVICE))
    assert got.device.type == DEVICE.type
    torch.testing.assert_close(got.cpu(), F.gelu(x + b, approximate="tanh"), rtol=1e-5, atol=1e-6)


def test_bias_gelu_gradients_on_the_accelerator():
    g = torch.Generator().manual_seed(4)
    x, b = torch.randn(6, 16, generator=g), torch.randn(16, generator=g)
    # clones: on the CPU .to(DEVICE) is the same tensor, and x, b must stay plain inputs
    xd, bd = x.clone().to(DEVICE).requires_grad_(), b.clone().to(DEVICE).requires_grad_()
    fused_ops.bias_gelu(xd, bd).sum().backward()
    xc, bc = x.clone().requires_grad_(), b.clone().requires_grad_()
    F.gelu(xc + bc, approximate="tanh").sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(bd.grad.cpu(), bc.grad, rtol=1e-5, atol=1e-5)


def test_training_matches_the_cpu_reference():
    torch.set_float32_matmul_precision("highest")
    model, losses = train(steps=20)
    assert next(model.parameters()).device.type == DEVICE.type
    assert losses == pytest.approx(REFERENCE_LOSSES, rel=1e-4, abs=1e-6)


def test_data_is_deterministic():
    (x1, y1), (x2, y2) = make_data(n=32, seed=5), make_data(n=32, seed=5)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
