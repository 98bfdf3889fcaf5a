import torch

from train import build_model


def test_model_on_gpu_forward_backward():
    model = build_model().cuda()
    x = torch.randn(4, 10).cuda()
    loss = model(x).sum()
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    assert next(model.parameters()).is_cuda
