import torch

import main
from data import SyntheticDigits
from model import Net


def test_forward_on_gpu():
    model = Net().cuda()
    out = model(torch.randn(4, 1, 8, 8).cuda())
    assert out.shape == (4, 10)
    assert torch.allclose(out.exp().sum(dim=1).cpu(), torch.ones(4))


def test_use_cuda_batches_reach_the_gpu():
    model = Net().cuda()
    loader = torch.utils.data.DataLoader(SyntheticDigits(64), batch_size=32)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    losses = main.train(model, loader, optimizer, epoch=1, use_cuda=True, log_interval=100)
    assert len(losses) == 2


def test_two_epochs_learn_the_digits():
    model, history = main.main(["--epochs", "2"])
    assert history["test_acc"][-1] > 0.8
    assert history["train_loss"][-1] < history["train_loss"][0]


def test_model_lives_on_the_gpu():
    model, _ = main.main(["--epochs", "1"])
    assert next(model.parameters()).is_cuda
