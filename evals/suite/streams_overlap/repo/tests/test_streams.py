import torch

from data import make_loader
from model import TwoTowerNet
from prefetch import CUDAPrefetcher
from train import train


def test_prefetcher_covers_the_loader():
    loader = make_loader(n=100, batch=32, shuffle=False)
    prefetcher = CUDAPrefetcher(loader)
    sizes = []
    x, y = prefetcher.next()
    while x is not None:
        assert x.dtype == torch.float32 and x.shape[1:] == (3, 8, 8)
        sizes.append(len(y))
        x, y = prefetcher.next()
    assert sizes == [32, 32, 32, 4]


def test_forward_on_two_streams():
    model = TwoTowerNet().cuda()
    out = model(torch.randn(5, 3, 8, 8, device="cuda"))
    torch.cuda.synchronize()
    assert out.shape == (5, 3) and torch.isfinite(out).all()


def test_training_learns_the_classes():
    _, history = train(epochs=2)
    assert history[-1][0] < history[0][0]
    assert history[-1][1] > 0.6
