import torch

from model import MLP, make_data
from train import predict, train


def test_forward_shape_on_gpu():
    model = MLP().cuda()
    x = torch.randn(8, 16, device="cuda")
    out = model(x)
    assert out.shape == (8, 1)
    assert out.device == x.device


def test_training_reduces_loss():
    model, losses = train(steps=12, batch=64)
    assert losses[-1] < losses[0]


def test_predict_returns_host_tensor():
    model = MLP().cuda()
    x, _ = make_data(n=4)
    out = predict(model, x)
    assert out.device.type == "cpu"
    assert out.shape == (4, 1)
