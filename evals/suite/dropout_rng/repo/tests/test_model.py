import torch

from model import DenoisingAE, make_signals
from train import train


def test_signals_are_bounded_and_reproducible():
    a, b = make_signals(n=8), make_signals(n=8)
    assert torch.equal(a, b) and a.abs().max() <= 1.0


def test_autoencoder_is_built_on_the_gpu():
    model = DenoisingAE(device="cuda")
    assert all(p.is_cuda for p in model.parameters())
    assert model(torch.randn(4, 24, device="cuda")).shape == (4, 24)


def test_seeded_training_is_reproducible():
    _, a = train(steps=3, seed=5)
    _, b = train(steps=3, seed=5)
    assert a == b


def test_training_lowers_the_loss():
    _, losses = train(steps=12)
    assert losses[-1] < losses[0]
