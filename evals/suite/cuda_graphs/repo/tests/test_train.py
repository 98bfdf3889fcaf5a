import torch

from data import make_data
from model import make_model
from train import train


def test_model_on_gpu():
    x, _ = make_data(n=8)
    assert make_model().cuda()(x.cuda()).shape == (8, 1)


def test_eager_training_lowers_the_loss():
    _, losses = train(steps=40, graphs=False)
    assert sum(losses[-5:]) < 0.5 * sum(losses[:5])


def test_graph_replay_trains_the_model():
    model, losses = train(steps=40, graphs=True)
    assert sum(losses[-5:]) < 0.5 * sum(losses[:5])
    assert all(p.is_cuda for p in model.parameters())
