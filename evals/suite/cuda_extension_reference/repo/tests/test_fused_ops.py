import torch
import torch.nn.functional as F

from fused_ops import bias_gelu, bias_gelu_reference
from train import train


def test_bias_gelu_matches_torch_gelu_on_gpu():
    x = torch.randn(64, 128, device="cuda")
    b = torch.randn(128, device="cuda")
    expected = F.gelu(x + b, approximate="tanh")
    torch.testing.assert_close(bias_gelu(x, b), expected, rtol=1e-5, atol=1e-6)


def test_bias_gelu_backward_matches_the_reference():
    x = torch.randn(8, 32).cuda().requires_grad_()
    b = torch.randn(32).cuda().requires_grad_()
    bias_gelu(x, b).square().sum().backward()
    x2, b2 = x.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    bias_gelu_reference(x2, b2).square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(b.grad, b2.grad)


def test_training_lowers_the_loss():
    _, losses = train(steps=30)
    assert sum(losses[-5:]) < sum(losses[:5])
